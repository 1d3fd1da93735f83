package workflows_test

import (
	"context"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
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
// from CTRF (passed, skipped, total); rewards, when set, is the whole
// reward.json dict (Harbor's verifier_result.rewards).
type proofWant struct {
	harbor                 float64
	t1flow                 *float64
	passed, skipped, total int
	rewards                map[string]float64
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
	"pip-install": {{1, nil, 4, 0, 4, nil}, {0, nil, 0, 0, 4, nil}},
	// Tests with 3.13-only syntax and stdlib, on the trixie toolchain's Python
	// 3.13; nop passes the version check only.
	"py313-features": {{1, nil, 5, 0, 5, nil}, {0, nil, 1, 0, 5, nil}},
	// The solution starts a server the tests query. Harbor runs the tests
	// beside it (reward 1), and so does t1flow's live verifier, in a
	// container of its own on the sandbox's network.
	"service-from-solution": {{1, nil, 3, 0, 3, nil}, {0, nil, 0, 0, 3, nil}},
	// Two skipped tests: pytest exits 0, reward 1.
	"skipped-tests": {{1, nil, 3, 2, 5, nil}, {0, nil, 1, 2, 5, nil}},
	// reward.txt is the fraction of checks right: the oracle gets 2 of 3.
	"partial-reward-txt": {{2.0 / 3, nil, 2, 0, 3, nil}, {0, nil, 0, 0, 3, nil}},
	// FROM python:3.11-slim, test.sh's `uvx -p 3.13`: the tests run on 3.13
	// (PEP 696, copy.replace), as Harbor's uv would download it; nop passes
	// the version check only.
	"uvx-python-313-on-311": {{1, nil, 3, 0, 3, nil}, {0, nil, 1, 0, 3, nil}},
	// reward.json from a grader with no test runner: one assertion, T1's.
	"reward-json": {{1, nil, 1, 0, 1, nil}, {0, nil, 0, 0, 1, nil}},
	// agent.user, verifier.user and environment.workdir, each a named reward
	// in reward.json (the image's USER is a third user): the oracle runs as
	// app in /srv/work, test.sh as grader there; nop leaves only the
	// verifier's own check.
	"users-and-workdir": {
		{1, nil, 1, 0, 1, map[string]float64{"reward": 1, "agent_user": 1, "workdir": 1, "verifier_user": 1}},
		{0, nil, 0, 0, 1, map[string]float64{"reward": 0, "agent_user": 0, "workdir": 0, "verifier_user": 1}},
	},
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
			if w.rewards != nil && !maps.Equal(ro.HarborRewards, w.rewards) {
				t.Errorf("%s on %s: harbor_rewards %v, want %v", kind, ro.Name, ro.HarborRewards, w.rewards)
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

// TestWorkerEnvFillsTaskVars: a task whose verifier.env reads a bare
// ${VAR} from the worker's environment (as an LLM judge's API key is read)
// fails as task_invalid, once and not retried, naming the key and the
// variable while the worker lacks it; with the variable set on the worker
// the same task resolves, its value having reached test.sh.
func TestWorkerEnvFillsTaskVars(t *testing.T) {
	const name = "T1FLOW_TEST_JUDGE_KEY"
	t.Setenv(name, "")
	os.Unsetenv(name) // restored (to unset) by t.Setenv's cleanup
	dir := filepath.Join(t.TempDir(), "judge-key")
	files := map[string]string{
		"instruction.md":         "Write ok to /app/ok.\n",
		"task.toml":              "version = \"1.0\"\n[metadata]\ncategory = \"scripting\"\ndifficulty = \"easy\"\n[verifier]\ntimeout_sec = 60.0\n[verifier.env]\nJUDGE_KEY = \"${" + name + "}\"\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"solution/solve.sh":      "#!/bin/bash\necho ok > /app/ok\n",
		// The reward needs both the solution's file and the worker's key.
		"tests/test.sh": "#!/bin/bash\nr=0\n[ \"$(cat /app/ok 2>/dev/null)\" = ok ] && [ \"$JUDGE_KEY\" = sk-test-42 ] && r=1\necho \"key ${#JUDGE_KEY} chars\"\necho $r > /logs/verifier/reward.txt\n",
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := newRig(t, true)
	refs := r.load(t, filepath.Dir(dir))
	sweep := func() workflows.RolloutResult {
		rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentOracle}}), 10*time.Minute)
		if len(rep.Rollouts) != 1 {
			t.Fatalf("%d rollouts, want 1", len(rep.Rollouts))
		}
		return rep.Rollouts[0]
	}
	ro := sweep()
	if ro.Outcome != workflows.OutcomeTaskInvalid || ro.Scored || ro.SandboxAttempts > 1 ||
		!strings.Contains(ro.Error, "verifier.env.JUDGE_KEY") || !strings.Contains(ro.Error, "needs "+name) || !strings.Contains(ro.Error, "set it where the worker runs") {
		t.Errorf("with %s unset: %s (scored %v, %d sandbox attempts): %s", name, ro.Outcome, ro.Scored, ro.SandboxAttempts, ro.Error)
	}
	os.Setenv(name, "sk-test-42")
	ro = sweep()
	if ro.Outcome != workflows.OutcomeResolved || ro.HarborReward == nil || *ro.HarborReward != 1 {
		t.Errorf("with %s set on the worker: %s, harbor_reward %v: %s", name, ro.Outcome, ro.HarborReward, ro.Error)
	}
}

// TestAgentUserProcessesDieBeforeVerification: on a task whose agent and
// verifier run as the same user other than root (app), a process the agent
// leaves behind that keeps replacing reward.json with a perfect one is
// killed before test.sh runs, so the rollout is not resolved. Nothing else
// stops it: the results directory is the verifier's user's, which is the
// agent's too. (A sandbox whose root lacked the capabilities of its
// container could not kill another user's processes.)
func TestAgentUserProcessesDieBeforeVerification(t *testing.T) {
	dir := verifierUserVariant(t, "app")
	r := newRig(t, true)
	refs := r.load(t, filepath.Dir(dir))
	cheat := `nohup bash -c 'while :; do rm -f /logs/verifier/reward.json; echo "{\"reward\": 1}" > /logs/verifier/reward.json; done' >/dev/null 2>&1 & sleep 1; id -un`
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{cheat}}}), 10*time.Minute)
	if len(rep.Rollouts) != 1 {
		t.Fatalf("%d rollouts, want 1", len(rep.Rollouts))
	}
	ro := rep.Rollouts[0]
	var rec workflows.RolloutRecord
	if err := store.GetJSON(context.Background(), r.st, *ro.Record, &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Turns) != 1 || !strings.Contains(rec.Turns[0].Preview, "app") {
		t.Fatalf("the cheat did not run as agent.user app: %+v", rec.Turns)
	}
	if ro.Resolved || !ro.Scored || ro.HarborReward == nil || *ro.HarborReward != 0 {
		t.Errorf("the agent's leftover writer was not stopped: %s, harbor_reward %v, rewards %v (%s)", ro.Outcome, ro.HarborReward, ro.HarborRewards, ro.Error)
	}
}

// verifierUserVariant copies examples/harbor-proof/users-and-workdir with
// verifier.user set to user, and returns the copy's directory.
func verifierUserVariant(t *testing.T, user string) string {
	t.Helper()
	src := filepath.Join(testenv.RepoRoot(), "examples/harbor-proof/users-and-workdir")
	dir := filepath.Join(t.TempDir(), "verifier-user-"+strings.ReplaceAll(user, ":", "-"))
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "task.toml"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(cfg), `user = "grader"`, `user = "`+user+`"`, 1)
	if changed == string(cfg) {
		t.Fatal(`users-and-workdir's task.toml no longer says verifier user = "grader"`)
	}
	if err := os.WriteFile(filepath.Join(dir, "task.toml"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUnknownVerifierUserIsVerifierError: a verifier.user whose user the
// sandbox's /etc/passwd, or whose named group its /etc/group, does not know
// (the task's mistake, or the agent's: it may edit both) keeps test.sh from
// running: a verifier_error, scored 0 (GetVersion verifier-error-scored),
// saying which user or group (not chown's "invalid group"). A named group it
// knows runs test.sh as that user.
func TestUnknownVerifierUserIsVerifierError(t *testing.T) {
	r := newRig(t, true)
	for _, c := range []struct{ user, want string }{
		{"nosuchgrader", "nosuchgrader (verifier.user, else the image's USER) is not in the sandbox's /etc/passwd"},
		{"grader:nosuchgroup", "nosuchgroup (verifier.user, else the image's USER) is not in the sandbox's /etc/group"},
		{"grader:grader", ""},
	} {
		refs := r.load(t, filepath.Dir(verifierUserVariant(t, c.user)))
		rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentOracle}}), 10*time.Minute)
		if len(rep.Rollouts) != 1 {
			t.Fatalf("%s: %d rollouts, want 1", c.user, len(rep.Rollouts))
		}
		ro := rep.Rollouts[0]
		if c.want == "" {
			if !ro.Scored || ro.HarborRewards["verifier_user"] != 1 {
				t.Errorf("verifier.user %s: %s (scored %v), rewards %v: want test.sh run as grader (%s)", c.user, ro.Outcome, ro.Scored, ro.HarborRewards, ro.Error)
			}
			continue
		}
		if ro.Outcome != workflows.OutcomeVerifierError || !ro.Scored || ro.Reward != 0 || !strings.Contains(ro.Error, c.want) {
			t.Errorf("verifier.user %s: %s (scored %v, reward %v): %s", c.user, ro.Outcome, ro.Scored, ro.Reward, ro.Error)
		}
	}
}
