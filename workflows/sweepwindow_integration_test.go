package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// TestEvalSweepContinuesAsNewWithRolloutsInFlight: a sweep of 3 tasks × 3
// attempts, 3 at a time, that continues as new after every 2 rollouts it
// starts, so rollouts are in flight at every continue-as-new and report to a
// later run. The report holds each (task, attempt) exactly once, and every
// rollout ran once. With T1FLOW_RECORD_HISTORY=1 it records the first run
// (continued as new), the last (started by it) and a rollout that reported
// to its parent, for the replay test.
func TestEvalSweepContinuesAsNewWithRolloutsInFlight(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks/log-level-counter", "../examples/tasks/json-config-merge", "../examples/tasks/csv-revenue-report")
	run := r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentNop},
		Attempts: 3, Concurrency: 3, ContinueEvery: 2})
	firstRun := run.GetRunID() // Get follows the chain to the last run
	rep := r.report(t, run, 15*time.Minute)
	seen := map[string]int{}
	for _, ro := range rep.Rollouts {
		seen[fmt.Sprintf("%s#%d", ro.Name, ro.Attempt)]++
		if !ro.Scored || ro.Outcome != workflows.OutcomeUnresolved {
			t.Errorf("nop on %s #%d: %s (%s)", ro.Name, ro.Attempt, ro.Outcome, ro.Error)
		}
	}
	for _, tk := range refs {
		for a := 1; a <= 3; a++ {
			if n := seen[fmt.Sprintf("%s#%d", tk.Name, a)]; n != 1 {
				t.Errorf("%s #%d is in the report %d times, want once", tk.Name, a, n)
			}
		}
	}
	if len(rep.Rollouts) != 9 || rep.Summary.Rollouts != 9 {
		t.Errorf("report: %d rollouts, summary %d, want 9", len(rep.Rollouts), rep.Summary.Rollouts)
	}
	ctx := context.Background()
	list := func(query string) int {
		resp, err := r.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Executions)
	}
	wid := ids.EvalSweepWorkflowID(rep.SweepID)
	runs := list(fmt.Sprintf("WorkflowId = '%s'", wid))
	if runs < 4 {
		t.Errorf("the sweep ran in %d runs, want at least 4 (9 rollouts, continuing as new every 2)", runs)
	}
	if n := list(fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s'", rep.SweepID)); n != 9 {
		t.Errorf("%d rollout workflows ran, want 9", n)
	}
	t.Logf("9 rollouts in %d runs", runs)
	recordRun(t, r.c, wid, firstRun, "testdata/evalsweep_continued_as_new.json")
	recordHistory(t, r.c, wid, "testdata/evalsweep_after_continue.json")
	recordHistory(t, r.c, rep.Rollouts[0].WorkflowID, "testdata/rollout_reported.json")
}

// TestEvalSweepRefusesWhatItCannotSchedule: a manifest not in the store, a
// manifest of no tasks, one with a task twice, both tasks and a manifest, a
// negative window: each fails at once, naming what is wrong.
func TestEvalSweepRefusesWhatItCannotSchedule(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks/log-level-counter")
	ctx := context.Background()
	put := func(key string, tasks []task.Ref) *store.Ref {
		ref, err := store.PutJSON(ctx, r.st, key, task.Pool{Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		return &ref
	}
	missing := *put("manifests/gone.json", refs)
	missing.URI = strings.Replace(missing.URI, "gone.json", "never-written.json", 1)
	oracle := activities.AgentSpec{Kind: activities.AgentOracle}
	for _, c := range []struct {
		name, want string
		in         workflows.EvalSweepInput
	}{
		{"missing manifest", "not in the store", workflows.EvalSweepInput{TaskManifest: &missing, Agent: oracle}},
		{"empty manifest", "tasks is empty", workflows.EvalSweepInput{TaskManifest: put("manifests/empty.json", nil), Agent: oracle}},
		{"a task twice", "are both", workflows.EvalSweepInput{TaskManifest: put("manifests/twice.json", append(refs, refs...)), Agent: oracle}},
		{"tasks and manifest", "give one, not both", workflows.EvalSweepInput{Tasks: refs, TaskManifest: put("manifests/one.json", refs), Agent: oracle}},
		{"negative window", "concurrency -1", workflows.EvalSweepInput{Tasks: refs, Agent: oracle, Concurrency: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err := r.startSweep(t, c.in).Get(cctx, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a failure naming %q", err, c.want)
			}
		})
	}
}

// TestSweepCountsARolloutTerminatedAfterItsRunContinued: a rollout that an
// earlier run of the sweep started is terminated by an operator, so it never
// reports. The sweep asks Temporal which of those closed, counts it as an
// infra error, and finishes, instead of waiting for it forever.
func TestSweepCountsARolloutTerminatedAfterItsRunContinued(t *testing.T) {
	defer func(d time.Duration) { workflows.OrphanCheckEvery = d }(workflows.OrphanCheckEvery)
	workflows.OrphanCheckEvery = 2 * time.Second
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks/log-level-counter")
	slow := activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"sleep 25"}}
	run := r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: slow, Attempts: 3, Concurrency: 3, ContinueEvery: 2})
	sweepID := strings.TrimPrefix(run.GetID(), "eval/")
	victim := ids.RolloutWorkflowID(ids.RolloutID(sweepID, "eval", 0, refs[0].ID, 1)) // the first run's first rollout
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for { // the third rollout is started by the second run
		third := ids.RolloutWorkflowID(ids.RolloutID(sweepID, "eval", 0, refs[0].ID, 3))
		if _, err := r.c.DescribeWorkflowExecution(ctx, third, ""); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the sweep never started its third rollout")
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := r.c.TerminateWorkflow(ctx, victim, "", "operator: stuck"); err != nil {
		t.Fatalf("terminate %s: %v", victim, err)
	}
	rep := r.report(t, run, 3*time.Minute)
	if len(rep.Rollouts) != 3 {
		t.Fatalf("report: %d rollouts, want 3", len(rep.Rollouts))
	}
	for _, ro := range rep.Rollouts {
		terminated := ro.WorkflowID == victim
		switch {
		case terminated && (ro.Outcome != workflows.OutcomeInfraError || !strings.Contains(ro.Error, "Terminated")):
			t.Errorf("terminated rollout: outcome %s (%s), want infra_error naming Terminated", ro.Outcome, ro.Error)
		case !terminated && !ro.Scored:
			t.Errorf("rollout %s: %s (%s), want scored", ro.WorkflowID, ro.Outcome, ro.Error)
		}
	}
}

// TestReaperCancelsTheRolloutsOfATerminatedSweep: a sweep that continues as
// new after every start has 3 rollouts mid-episode (their parents' runs all
// continued as new). The host's reaper leaves them alone while the sweep
// runs; once the sweep is terminated (which cancels nothing), the next
// reaper run asks each to cancel, and their own cleanup removes their
// sandboxes.
func TestReaperCancelsTheRolloutsOfATerminatedSweep(t *testing.T) {
	r := newRig(t, true)
	refs := r.load(t, "../examples/tasks/log-level-counter")
	agent := activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{"sleep 300"}}
	run := r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: agent, Attempts: 3, Concurrency: 3, ContinueEvery: 1})
	sweep := strings.TrimPrefix(run.GetID(), "eval/")
	deadline := time.Now().Add(3 * time.Minute)
	for on := agentPhases(t, r, sweep); on[r.host] < 3; on = agentPhases(t, r, sweep) {
		if time.Now().After(deadline) {
			t.Fatalf("rollouts mid-episode by host %v, want 3 on %s", on, r.host)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctx := context.Background()
	reap := func(n int) activities.ReapResult {
		run, err := r.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: fmt.Sprintf("%s-test-%d", ids.ReaperWorkflowID(r.host), n), TaskQueue: ids.ControlQueue,
		}, workflows.ReaperWorkflow, workflows.ReaperInput{Host: r.host, TTLSec: 3600})
		if err != nil {
			t.Fatal(err)
		}
		var rr activities.ReapResult
		if err := run.Get(ctx, &rr); err != nil {
			t.Fatal(err)
		}
		return rr
	}
	// Removed may name other tests' leftovers (a shared daemon): not checked.
	if rr := reap(1); len(rr.Cancelled) != 0 || rr.Kept != 3 {
		t.Fatalf("reaper with the sweep running: %+v, want the 3 sandboxes kept and nothing cancelled", rr)
	}
	if err := r.c.TerminateWorkflow(ctx, run.GetID(), "", "test: terminated with rollouts in flight"); err != nil {
		t.Fatal(err)
	}
	rr := reap(2)
	if len(rr.Cancelled) != 3 {
		t.Fatalf("reaper after the sweep was terminated: %+v, want its 3 rollouts cancelled", rr)
	}
	for _, c := range rr.Cancelled {
		if !strings.Contains(c, "parent "+run.GetID()+" terminated") {
			t.Errorf("cancelled %q: want it to name the terminated sweep", c)
		}
	}
	query := fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s' AND ExecutionStatus = 'Canceled'", sweep)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		resp, err := r.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatal(err)
		}
		left := testenv.Containers(t, sandbox.LabelHost, r.host)
		if resp.Count == 3 && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 rollouts cancelled, sandboxes left %v", resp.Count, left)
		}
	}
}
