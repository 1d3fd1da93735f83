package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/harborout"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/workflows"
	"github.com/t1flow/t1flow/workflows/sweepstore"
)

// TestResumeRerunsOnlyTheErroredRollouts: a sweep of 3 attempts of a task,
// each solving it after a sleep; one rollout is cancelled mid-episode (an
// infra error, unscored). A resume filtered on VerifierError reruns nothing;
// one on the default types reruns that rollout alone, keeps the two others
// (their rollout IDs unchanged) and reports 3/3 resolved. The export of the
// resumed sweep loads with Harbor's own models, its numbers the report's.
func TestResumeRerunsOnlyTheErroredRollouts(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks/log-level-counter")
	solve, err := os.ReadFile("../examples/tasks/log-level-counter/solution/solve.sh")
	if err != nil {
		t.Fatal(err)
	}
	agent := activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"sleep 8", string(solve)}}
	in := workflows.EvalSweepInput{Tasks: refs, Agent: agent, Attempts: 3, Concurrency: 3}
	run := r.startSweep(t, in)
	sweep := strings.TrimPrefix(run.GetID(), "eval/")
	victim := ids.RolloutWorkflowID(ids.RolloutID(sweep, "eval", 0, refs[0].ID, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	waitRunning(ctx, t, r.c, victim)
	time.Sleep(2 * time.Second) // mid-episode: in its sleep
	if err := r.c.CancelWorkflow(ctx, victim, ""); err != nil {
		t.Fatalf("cancel %s: %v", victim, err)
	}
	base := r.report(t, run, 5*time.Minute)
	if base.Summary.Resolved != 2 || base.Summary.Unscored != 1 || base.Summary.Outcomes[workflows.OutcomeInfraError] != 1 {
		t.Fatalf("sweep: resolved %d, unscored %d, outcomes %v; want 2, 1 infra_error", base.Summary.Resolved, base.Summary.Unscored, base.Summary.Outcomes)
	}
	manifest, err := r.st.Lookup(ctx, "evals/"+ids.Clean(sweep)+"/tasks.json")
	if err != nil {
		t.Fatal(err)
	}
	in.SweepID, in.Tasks, in.TaskManifest = sweep, nil, &manifest

	// Round 1, filtered on an error type no rollout has: nothing reruns.
	res := r.resume(ctx, t, workflows.EvalResumeInput{SweepID: sweep, Round: 1, Sweep: in, ErrorTypes: []string{workflows.ErrorVerifier}})
	if res.Summary.Resolved != 2 || res.Summary.Unscored != 1 || res.Summary.Rollouts != 3 {
		t.Fatalf("resume -f VerifierError: %+v, want the sweep's numbers unchanged", res.Summary)
	}
	// Round 2, the default types: the cancelled rollout alone reruns.
	res = r.resume(ctx, t, workflows.EvalResumeInput{SweepID: sweep, Round: 2, Sweep: in})
	if res.Summary.Resolved != 3 || res.Summary.Unscored != 0 || res.Summary.Rollouts != 3 || res.Summary.ResolvedRate != 1 {
		t.Fatalf("resume: %+v, want 3/3 resolved", res.Summary)
	}
	rep, _, round, err := sweepstore.LatestReport(ctx, r.st, sweep)
	if err != nil || round != 2 {
		t.Fatalf("latest report: round %d, %v; want round 2", round, err)
	}
	for _, ro := range rep.Rollouts {
		step := 0
		if ro.Attempt == 2 {
			step = 2 // the rerun
		}
		if want := ids.RolloutID(sweep, "eval", step, refs[0].ID, ro.Attempt); ro.RolloutID != want {
			t.Errorf("attempt %d: rollout %s, want %s (reruns are step 2, the kept ones unchanged)", ro.Attempt, ro.RolloutID, want)
		}
	}
	recordHistory(t, r.c, ids.EvalResumeWorkflowID(sweep, 2), "testdata/evalresume.json")
	checkHarborExport(ctx, t, r, rep)
}

func (r *rig) resume(ctx context.Context, t *testing.T, in workflows.EvalResumeInput) workflows.EvalSweepResult {
	t.Helper()
	run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids.EvalResumeWorkflowID(in.SweepID, in.Round), TaskQueue: ids.ControlQueue},
		workflows.EvalResumeWorkflow, in)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.EvalSweepResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("resume round %d: %v", in.Round, err)
	}
	return res
}

// checkHarborExport writes rep as Harbor's job directory and loads it with
// Harbor's models: 3 trials with reward 1, Harbor's mean 1, 3 steps each
// (the instruction and two turns).
func checkHarborExport(ctx context.Context, t *testing.T, r *rig, rep workflows.EvalReport) {
	t.Helper()
	if _, err := os.Stat(harbor.Python()); err != nil {
		if testenv.Required() {
			t.Fatalf("%s: run scripts/ensure-harbor-env.sh (make harborenv)", harbor.Python())
		}
		t.Skipf("no Harbor env at %s (make harborenv)", harbor.Python())
	}
	j, err := sweepstore.HarborJob(ctx, r.st, rep, "examples", sweepstore.HarborTimes{Started: time.Now().Add(-time.Minute), Finished: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "job")
	if err := harborout.Write(dir, j); err != nil {
		t.Fatal(err)
	}
	got, err := harborout.Check(ctx, harbor.Python(), dir)
	if err != nil {
		t.Fatalf("harbor rejects the export: %v", err)
	}
	if len(got.Trials) != 3 || got.Metrics["t1flow-scripted__examples"]["mean"] != 1 || got.NErroredTrials != 0 {
		t.Fatalf("harbor reads %+v, want 3 trials, mean 1, none errored", got)
	}
	for name, tr := range got.Trials {
		if tr.Reward == nil || *tr.Reward != 1 || tr.Steps != 3 {
			t.Errorf("trial %s as harbor reads it: %+v, want reward 1 and 3 steps", name, tr)
		}
	}
}

// waitRunning waits until workflow wid exists.
func waitRunning(ctx context.Context, t *testing.T, c client.Client, wid string) {
	t.Helper()
	for {
		if _, err := c.DescribeWorkflowExecution(ctx, wid, ""); err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never started", wid)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
