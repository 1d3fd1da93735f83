package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// TestTB21EnvAndArtifacts runs the oracle on a schema 1.1 task.toml:
// [environment.env] reaches the agent's sandbox and the verifier,
// solution.env the oracle, and artifacts land in the rollout record as claim
// checks (one missing, and said so).
func TestTB21EnvAndArtifacts(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "testdata/tasks/tb21-env-artifacts")
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentOracle}}), 5*time.Minute)
	ro := rep.Rollouts[0]
	if ro.Outcome != workflows.OutcomeResolved || ro.Passed != 3 {
		t.Fatalf("oracle: %s %d/%d (%s)", ro.Outcome, ro.Passed, ro.Total, ro.Error)
	}
	var rec workflows.RolloutRecord
	if err := store.GetJSON(context.Background(), r.st, *ro.Record, &rec); err != nil {
		t.Fatal(err)
	}
	got := map[string]activities.CollectedArtifact{}
	for _, a := range rec.Verify.Artifacts {
		got[a.Destination] = a
	}
	for _, dst := range []string{"report", "summary/summary.txt"} {
		a := got[dst]
		if a.Ref == nil || a.Ref.Bytes == 0 {
			t.Errorf("artifact %s not collected: %+v", dst, a)
			continue
		}
		if _, err := r.st.Get(context.Background(), *a.Ref); err != nil {
			t.Errorf("artifact %s: %v", dst, err)
		}
	}
	if a := got["never-written"]; a.Ref != nil || a.Missing == "" {
		t.Errorf("a missing artifact should say so: %+v", a)
	}
}
