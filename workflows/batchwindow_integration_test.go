package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	gw := worker.New(r.c, ids.GPUQueue, worker.Options{})
	gw.RegisterActivityWithOptions(func(ctx context.Context, in gpu.TrainInput) (gpu.Metrics, error) {
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
	}, activity.RegisterOptions{Name: "TrainerPPOStep"})
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	defer gw.Stop()

	campaign := fmt.Sprintf("can-%d", time.Now().UnixNano())
	in := workflows.PPOStepInput{RolloutBatch: workflows.RolloutBatch{Campaign: campaign, KeyPrefix: campaign + "/", Tasks: refs, Version: "random-0",
		Agent:   activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{inf.URL()}, MaxNewTokens: 8, Temperature: 1},
		TurnCap: 1, S: 20, Concurrency: 2, DeadlineMinutes: 10, ContinueEvery: 1}, Step: 1, MaxFailedShare: 0}
	wid := ids.PPOStepWorkflowID(campaign, 1)
	run, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: wid, TaskQueue: ids.ControlQueue}, workflows.PPOStepWorkflow, in)
	if err != nil {
		t.Fatal(err)
	}
	firstRun := run.GetRunID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var rec workflows.StepRecord
	if err := run.Get(ctx, &rec); err != nil {
		t.Fatalf("PPO step: %v", err)
	}
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
