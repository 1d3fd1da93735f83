package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// TestPPOStepContinuesAsNewWithRolloutsInFlight: a PPO step of 3 policy
// rollouts, 2 at a time, that continues as new after every rollout it
// starts, on a replica that drops the routing of its first 3 responses (so
// samples abort and start again, maybe in a later run), with the batch
// written in chunks of 1. The trainer gets the 3 samples' trajectories,
// each task once, from the chunks; a run handed over rollouts in flight;
// every rollout started is accounted for. With T1FLOW_RECORD_HISTORY=1 it
// records the first run (continued as new) and the last for the replay test.
func TestPPOStepContinuesAsNewWithRolloutsInFlight(t *testing.T) {
	defer func(n int) { workflows.FlushEvery = n }(workflows.FlushEvery)
	workflows.FlushEvery = 1
	r := newRig(t, true)
	inf := inference(t, "--seed", "0", "--drop-routing-first", "3")
	refs := r.load(t, "../examples/tasks/log-level-counter", "../examples/tasks/csv-revenue-report", "../examples/tasks/json-config-merge")
	var mu sync.Mutex
	var got gpu.TrainInput
	var tasks []string
	fakeTrainer(t, r, "TrainerPPOStep", func(ctx context.Context, in gpu.TrainInput) (gpu.Metrics, error) {
		mu.Lock()
		defer mu.Unlock()
		got, tasks = in, nil
		for _, ref := range in.Chunks { // what gpu.Activities reads: the chunks, checksummed
			b, err := r.st.Get(ctx, ref)
			if err != nil {
				return nil, err
			}
			var part []gpu.TrajectoryRef
			if err := json.Unmarshal(b, &part); err != nil {
				return nil, err
			}
			for _, tr := range part {
				tasks = append(tasks, tr.TaskID)
			}
		}
		for _, tr := range in.Trajectories {
			tasks = append(tasks, tr.TaskID)
		}
		return gpu.Metrics{"policy_loss": 0.0}, nil
	})

	campaign := fmt.Sprintf("can-%d", time.Now().UnixNano())
	in := workflows.PPOStepInput{RolloutBatch: everyStart(campaign, refs, inf.URL()), Step: 1, MaxFailedShare: 0}
	wid := ids.PPOStepWorkflowID(campaign, 1)
	var rec workflows.StepRecord
	firstRun := runToEnd(t, r.c, wid, workflows.PPOStepWorkflow, in, &rec)
	ctx := context.Background()
	mu.Lock()
	defer mu.Unlock()
	retried := 0
	for k, n := range rec.Retries {
		retried += k * n
	}
	if rec.Rollouts != 3 || rec.Trained != 3 || rec.Aborted != 0 || len(tasks) != 3 {
		t.Fatalf("step %+v, trainer got %d trajectories: want the 3 samples", rec, len(tasks))
	}
	seen := map[string]int{}
	for _, id := range tasks {
		seen[id]++
	}
	for _, ref := range refs {
		if seen[ref.ID] != 1 {
			t.Errorf("task %s is in the trained batch %d times, want once (batch %v)", ref.Name, seen[ref.ID], tasks)
		}
	}
	if len(got.Chunks) < 1 {
		t.Errorf("trainer got %d chunks and %d inline: want a result that came in before the last start in a chunk of 1", len(got.Chunks), len(got.Trajectories))
	}
	list := func(query string) int {
		resp, err := r.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Executions)
	}
	runs := list(fmt.Sprintf("WorkflowId = '%s'", wid))
	if runs < 3 {
		t.Errorf("the step ran in %d runs, want at least 3 (3 samples, continuing as new after each start)", runs)
	}
	if n := list(fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s'", campaign)); n != 3+retried {
		t.Errorf("%d rollout workflows ran, want %d (3 samples, %d retries %v)", n, 3+retried, retried, rec.Retries)
	}
	if inFlight := handedOver(t, r.c, wid, firstRun); inFlight < 1 {
		t.Errorf("the first run continued as new with %d rollouts in flight, want at least 1", inFlight)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
	t.Logf("3 samples (retries %v) in %d runs, %d chunks", rec.Retries, runs, len(got.Chunks))
	recordRun(t, r.c, wid, firstRun, "testdata/ppo_continued_as_new.json")
	recordHistory(t, r.c, wid, "testdata/ppo_after_continue.json")
}

// fakeTrainer serves the trainer activity name on the GPU queue with fn:
// what a workflow hands the trainer, recorded.
func fakeTrainer(t *testing.T, r *rig, name string, fn func(context.Context, gpu.TrainInput) (gpu.Metrics, error)) {
	t.Helper()
	gw := worker.New(r.c, ids.GPUQueue, worker.Options{})
	gw.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
}

// everyStart is a batch of policy rollouts on the replica at url, 2 at a
// time, whose workflow continues as new after every rollout it starts.
func everyStart(campaign string, refs []task.Ref, url string) workflows.RolloutBatch {
	return workflows.RolloutBatch{Campaign: campaign, KeyPrefix: campaign + "/", Tasks: refs, Version: "random-0",
		Agent:   activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{url}, MaxNewTokens: 8, Temperature: 1},
		TurnCap: 1, S: 20, Concurrency: 2, DeadlineMinutes: 10, ContinueEvery: 1}
}

// runToEnd starts workflow wf as wid on the control queue, waits (10
// minutes at most) for the end of its chain of runs into out, and returns
// the first run's ID.
func runToEnd(t *testing.T, c client.Client, wid string, wf, in, out any) string {
	t.Helper()
	run, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: wid, TaskQueue: ids.ControlQueue}, wf, in)
	if err != nil {
		t.Fatal(err)
	}
	first := run.GetRunID() // Get follows the chain to the last run
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run.Get(ctx, out); err != nil {
		t.Fatalf("%s: %v", wid, err)
	}
	return first
}

// handedOver is how many rollouts run runID of wid handed to the next run
// (its continue-as-new input's window).
func handedOver(t *testing.T, c client.Client, wid, runID string) int {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), wid, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes()
		if a == nil {
			t.Fatalf("run %s of %s closed with %s, not continue-as-new", runID, wid, ev.GetEventType())
		}
		var next workflows.PPOStepInput
		if err := converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &next); err != nil {
			t.Fatal(err)
		}
		if next.Window == nil {
			t.Fatalf("run %s of %s continued as new without its window", runID, wid)
		}
		return len(next.Window.InFlight)
	}
	t.Fatalf("run %s of %s has no close event", runID, wid)
	return 0
}

// TestWarmupContinuesAsNewMidRound: a critic warm-up of 2 rounds × 2
// epochs over 2 tasks, continuing as new after every rollout it starts, so
// runs hand over rounds and epochs in progress. Each critic_fit gets its
// round's 4 trajectories (each task once per epoch) under its own key, the
// gate reads round 2's held-out EV, and every rollout ran once.
func TestWarmupContinuesAsNewMidRound(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "0")
	refs := r.load(t, "../examples/tasks/log-level-counter", "../examples/tasks/csv-revenue-report")
	var mu sync.Mutex
	fits := map[string][]string{}   // key -> task IDs trained on
	seenBy := map[string][]string{} // key -> task IDs sent as seen (the rounds before)
	fakeTrainer(t, r, "TrainerCriticFit", func(ctx context.Context, in gpu.TrainInput) (gpu.Metrics, error) {
		mu.Lock()
		defer mu.Unlock()
		var tasks, seen []string
		for _, tr := range in.Trajectories {
			tasks = append(tasks, tr.TaskID)
		}
		for _, tr := range in.Seen {
			seen = append(seen, tr.TaskID)
		}
		fits[in.Key], seenBy[in.Key] = tasks, seen
		return gpu.Metrics{"explained_variance_before": 0.5, "explained_variance": 0.9, "held_out": float64(len(tasks))}, nil
	})
	campaign := fmt.Sprintf("warm-%d", time.Now().UnixNano())
	in := workflows.WarmupInput{RolloutBatch: everyStart(campaign, refs, inf.URL()), Epochs: 2, FitEpochs: 1, Gate: 0.3, MaxRounds: 2}
	wid := campaign + "/warmup"
	var res workflows.WarmupResult
	firstRun := runToEnd(t, r.c, wid, workflows.CriticWarmupWorkflow, in, &res)
	ctx := context.Background()
	mu.Lock()
	defer mu.Unlock()
	if res.Rounds != 2 || res.WarmEV == nil || *res.WarmEV != 0.5 || len(res.History) != 2 || res.Failed+res.Aborted+res.Stale != 0 {
		t.Fatalf("warm-up result %+v: want the gate passed in round 2 on held-out EV 0.5, nothing left out", res)
	}
	for round := 1; round <= 2; round++ {
		key := fmt.Sprintf("%scritic/%d", in.KeyPrefix, round)
		seen := map[string]int{}
		for _, id := range fits[key] {
			seen[id]++
		}
		if len(fits[key]) != 4 || seen[refs[0].ID] != 2 || seen[refs[1].ID] != 2 {
			t.Errorf("critic_fit %s trained on %v: want each task once per epoch (4)", key, fits[key])
		}
	}
	if len(fits) != 2 {
		t.Errorf("critic_fit ran under %d keys, want 2: %v", len(fits), fits)
	}
	// Round 2 ran in later runs than round 1: its seen rollouts came through continue-as-new.
	if k1, k2 := in.KeyPrefix+"critic/1", in.KeyPrefix+"critic/2"; len(seenBy[k1]) != 0 || strings.Join(seenBy[k2], ",") != strings.Join(fits[k1], ",") {
		t.Errorf("seen: round 1 %v, round 2 %v; want none, then round 1's %v", seenBy[k1], seenBy[k2], fits[k1])
	}
	resp, err := r.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", wid), PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if runs := len(resp.Executions); runs < 5 {
		t.Errorf("the warm-up ran in %d runs, want at least 5 (8 rollouts, continuing as new after each start)", runs)
	}
	resp, err = r.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowType = 'RolloutWorkflow' AND CampaignID = '%s'", campaign), PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Executions); n != 8 {
		t.Errorf("%d rollout workflows ran, want 8 (2 rounds × 2 epochs × 2 tasks)", n)
	}
	recordRun(t, r.c, wid, firstRun, "testdata/warmup_continued_as_new.json")
	recordHistory(t, r.c, wid, "testdata/warmup_after_continue.json")
}
