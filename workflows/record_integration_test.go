package workflows_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/workflows"
)

// TestRecordHistoriesOfEveryType records, for the replay test, real histories
// of the workflow types and error paths no other integration test records:
// the reaper, audit and synthesis sweeps and their children, a PPO step that
// fails on a partial batch, a sweep whose rollout fails (a task whose image
// does not build) and a sweep rejected on bad input. It runs only with
// T1FLOW_RECORD_HISTORY=1; TestEveryWorkflowTypeHasARecordedHistory checks
// the result.
func TestRecordHistoriesOfEveryType(t *testing.T) {
	if os.Getenv("T1FLOW_RECORD_HISTORY") != "1" {
		t.Skip("records histories only with T1FLOW_RECORD_HISTORY=1")
	}
	r := newRig(t, true)
	ctx := context.Background()
	start := func(wf any, id string, in any) client.WorkflowRun {
		run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: ids.ControlQueue, WorkflowExecutionTimeout: 15 * time.Minute}, wf, in)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	stamp := time.Now().UnixNano()

	var reaped activities.ReapResult
	r.run(t, workflows.ReaperWorkflow, fmt.Sprintf("%s-record-%d", ids.ReaperWorkflowID(r.host), stamp), workflows.ReaperInput{Host: r.host, TTLSec: 3600}, &reaped, 5*time.Minute)
	recordHistory(t, r.c, fmt.Sprintf("%s-record-%d", ids.ReaperWorkflowID(r.host), stamp), "testdata/reaper.json")

	// A sweep rejected at once: no tasks.
	bad := start(workflows.EvalSweepWorkflow, fmt.Sprintf("eval/record-bad-%d", stamp), workflows.EvalSweepInput{Agent: activities.AgentSpec{Kind: activities.AgentOracle}})
	if err := bad.Get(ctx, nil); err == nil {
		t.Fatal("a sweep of no tasks succeeded")
	}
	recordHistory(t, r.c, bad.GetID(), "testdata/evalsweep_bad_input.json")

	// A task whose image does not build: its rollout fails, the sweep reports it.
	broken := filepath.Join(t.TempDir(), "broken-image")
	if err := os.CopyFS(broken, os.DirFS("testdata/tasks/partial-solution")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "environment", "Dockerfile"), []byte("FROM ubuntu:22.04\nRUN exit 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refs := r.load(t, broken, "testdata/tasks/partial-solution")
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Concurrency: 2}), 10*time.Minute)
	for _, ro := range rep.Rollouts {
		t.Logf("%s: %s (%s)", ro.Name, ro.Outcome, ro.Error)
		if ro.Name == "broken-image" {
			recordHistory(t, r.c, ro.WorkflowID, "testdata/rollout_task_invalid.json")
		}
	}
	recordHistory(t, r.c, ids.EvalSweepWorkflowID(rep.SweepID), "testdata/evalsweep_failed_rollout.json")

	// A PPO step whose rollouts bring no trajectory (the oracle): a partial
	// batch, failed before the trainer is called.
	step := start(workflows.PPOStepWorkflow, fmt.Sprintf("ppo/record-%d", stamp), workflows.PPOStepInput{
		RolloutBatch: workflows.RolloutBatch{Campaign: fmt.Sprintf("record-%d", stamp), KeyPrefix: "record/", Tasks: refs[1:], Version: "v0", TurnCap: 2, S: 20, Concurrency: 1,
			Agent: activities.AgentSpec{Kind: activities.AgentOracle, Temperature: 1}, DeadlineMinutes: 5},
		Step: 1, MaxFailedShare: 0.5})
	if err := step.Get(ctx, nil); err == nil {
		t.Fatal("a PPO step without trajectories trained")
	}
	recordHistory(t, r.c, step.GetID(), "testdata/ppo_partial_batch.json")

	audits := r.load(t, "testdata/audit/good-sum", "testdata/audit/weak-verifier")
	runID := fmt.Sprintf("record-audit-%d", stamp)
	var ares workflows.AuditSweepResult
	r.run(t, workflows.AuditSweepWorkflow, "auditsweep/"+runID, workflows.AuditSweepInput{RunID: runID, Tasks: audits, Concurrency: 2}, &ares, 15*time.Minute)
	recordHistory(t, r.c, "auditsweep/"+runID, "testdata/auditsweep.json")
	recordHistory(t, r.c, ids.AuditWorkflowID(runID, audits[1].ID), "testdata/audit_reject.json")

	seeds := r.load(t, "../examples/seeds/line-count")
	runID = fmt.Sprintf("record-synth-%d", stamp)
	var sres workflows.SynthSweepResult
	r.run(t, workflows.SynthSweepWorkflow, "synthsweep/"+runID, workflows.SynthSweepInput{RunID: runID, Seeds: seeds, PerSeed: 1, Rounds: 1, RNGSeed: 11, Pool: "synth-" + runID}, &sres, 15*time.Minute)
	recordHistory(t, r.c, "synthsweep/"+runID, "testdata/synthsweep.json")
	recordHistory(t, r.c, ids.SynthesisWorkflowID(runID, seeds[0].ID, 0), "testdata/synthesis.json")
}
