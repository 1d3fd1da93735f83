package workflows_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// proofWant is one examples/harbor-proof task's expected result for one
// agent: Harbor's reward by Harbor's rules (reward.json, else reward.txt;
// TestHarborOracleAgrees runs Harbor itself and says where it gives
// otherwise offline), t1flow's harbor_reward when it differs (a measured
// divergence, documented in docs/task-format.md), and T1's assertion counts
// from CTRF (passed, skipped, total).
type proofWant struct {
	harbor                 float64
	t1flow                 *float64
	passed, skipped, total int
}

func (w proofWant) reward() float64 {
	if w.t1flow != nil {
		return *w.t1flow
	}
	return w.harbor
}

// harborProof are the expected results, oracle and nop, per task.
var harborProof = map[string][2]proofWant{
	// pip install under FROM python:3.13-slim-bookworm, at build time and in solve.sh.
	"pip-install": {{1, nil, 4, 0, 4}, {0, nil, 0, 0, 4}},
	// Tests with 3.13-only syntax and stdlib, on the trixie toolchain's Python
	// 3.13; nop passes the version check only.
	"py313-features": {{1, nil, 5, 0, 5}, {0, nil, 1, 0, 5}},
	// The solution starts a server the tests query. Harbor runs the tests
	// beside it (reward 1), and so does t1flow's live verifier, in a
	// container of its own on the sandbox's network.
	"service-from-solution": {{1, nil, 3, 0, 3}, {0, nil, 0, 0, 3}},
	// Two skipped tests: pytest exits 0, reward 1.
	"skipped-tests": {{1, nil, 3, 2, 5}, {0, nil, 1, 2, 5}},
	// reward.txt is the fraction of checks right: the oracle gets 2 of 3.
	"partial-reward-txt": {{2.0 / 3, nil, 2, 0, 3}, {0, nil, 0, 0, 3}},
	// FROM python:3.11-slim, test.sh's `uvx -p 3.13`: the tests run on 3.13
	// (PEP 696, copy.replace), as Harbor's uv would download it; nop passes
	// the version check only.
	"uvx-python-313-on-311": {{1, nil, 3, 0, 3}, {0, nil, 1, 0, 3}},
	// reward.json from a grader with no test runner: one assertion, T1's.
	"reward-json": {{1, nil, 1, 0, 1}, {0, nil, 0, 0, 1}},
}

// TestHarborProofTasks runs the oracle and the nop agent on every
// examples/harbor-proof task through the real path (task image built from
// the mapped base, sandbox, sealed verifier, Temporal sweep) and checks each
// rollout's Harbor reward, resolution and T1 assertions against harborProof.
func TestHarborProofTasks(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, filepath.Join(testenv.RepoRoot(), "examples/harbor-proof"))
	if len(refs) != len(harborProof) {
		t.Fatalf("%d tasks in examples/harbor-proof, %d expected results", len(refs), len(harborProof))
	}
	for i, kind := range []string{activities.AgentOracle, activities.AgentNop} {
		rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Concurrency: 2, Agent: activities.AgentSpec{Kind: kind}}), 15*time.Minute)
		if len(rep.Rollouts) != len(refs) {
			t.Fatalf("%s: %d rollouts for %d tasks", kind, len(rep.Rollouts), len(refs))
		}
		for _, ro := range rep.Rollouts {
			want, ok := harborProof[ro.Name]
			if !ok {
				t.Fatalf("no expected result for %s", ro.Name)
			}
			w := want[i]
			var rec workflows.RolloutRecord
			if err := store.GetJSON(context.Background(), r.st, *ro.Record, &rec); err != nil {
				t.Fatal(err)
			}
			skipped := 0
			if rec.Verify != nil {
				for _, a := range rec.Verify.Assertions {
					if a.Status == activities.StatusSkipped {
						skipped++
					}
				}
			}
			got := math.NaN()
			if ro.HarborReward != nil {
				got = *ro.HarborReward
			}
			t.Logf("%-6s %-22s %-10s harbor_reward %.4f (Harbor: %.4f) T1 %d/%d, %d skipped %s", kind, ro.Name, ro.Outcome, got, w.harbor, ro.Passed, ro.Total, skipped, ro.Error)
			if !ro.Scored || math.Abs(got-w.reward()) > 1e-3 {
				t.Errorf("%s on %s: harbor_reward %v (scored %v, %s), want %v", kind, ro.Name, got, ro.Scored, ro.Error, w.reward())
			}
			if ro.Resolved != (w.reward() == 1) {
				t.Errorf("%s on %s: resolved %v at reward %v", kind, ro.Name, ro.Resolved, got)
			}
			if ro.Passed != w.passed || ro.Total != w.total || skipped != w.skipped {
				t.Errorf("%s on %s: T1 %d/%d with %d skipped, want %d/%d with %d", kind, ro.Name, ro.Passed, ro.Total, skipped, w.passed, w.total, w.skipped)
			}
		}
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
}
