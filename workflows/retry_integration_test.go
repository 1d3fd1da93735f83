package workflows_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// A replica that drops the routing of its first 3 responses aborts the first
// sample's rollout (3 sandboxes, one turn each): the PPO step starts it again
// and trains on both samples, recording 1 retry. Before retries it trained
// on 1 of 2 (or failed over max_failed_share 0).
func TestPPOStepRetriesRolloutAbortedByFlakyReplica(t *testing.T) {
	r := newRig(t, true)
	inf := inference(t, "--seed", "0", "--drop-routing-first", "3")
	refs := r.load(t, "../examples/tasks/log-level-counter", "../examples/tasks/csv-revenue-report")
	// The trainer: only what the step hands it.
	var mu sync.Mutex
	trained := -1
	fakeTrainer(t, r, "TrainerPPOStep", func(_ context.Context, in gpu.TrainInput) (gpu.Metrics, error) {
		mu.Lock()
		defer mu.Unlock()
		trained = len(in.Trajectories)
		return gpu.Metrics{"policy_loss": 0.0}, nil
	})

	campaign := fmt.Sprintf("retry-%d", time.Now().UnixNano())
	in := workflows.PPOStepInput{RolloutBatch: workflows.RolloutBatch{Campaign: campaign, KeyPrefix: campaign + "/", Tasks: refs, Version: "random-0",
		Agent:   activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{inf.URL()}, MaxNewTokens: 8, Temperature: 1},
		TurnCap: 1, S: 20, Concurrency: 1, DeadlineMinutes: 10}, Step: 1, MaxFailedShare: 0}
	run, err := r.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: ids.PPOStepWorkflowID(campaign, 1), TaskQueue: ids.ControlQueue},
		workflows.PPOStepWorkflow, in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var rec workflows.StepRecord
	if err := run.Get(ctx, &rec); err != nil {
		t.Fatalf("PPO step: %v", err)
	}
	if rec.Rollouts != 2 || rec.Trained != 2 || trained != 2 || rec.Aborted != 0 {
		t.Fatalf("step %+v, trainer got %d trajectories: want both samples", rec, trained)
	}
	if rec.RetriesMax != 1 || fmt.Sprint(rec.Retries) != "[1 1]" {
		t.Fatalf("retries %v (max %d): want one sample retried once", rec.Retries, rec.RetriesMax)
	}
	// The retry is its own rollout (attempt 2), found by its deterministic ID.
	first := ids.RolloutWorkflowID(ids.RolloutID(campaign, "ppo", 1, refs[0].ID, 1))
	retry := ids.RolloutWorkflowID(ids.RolloutID(campaign, "ppo", 1, refs[0].ID, 2))
	var a, b workflows.RolloutResult
	if err := r.c.GetWorkflow(ctx, first, "").Get(ctx, &a); err != nil || a.Outcome != workflows.OutcomeAborted || a.SandboxAttempts != 3 {
		t.Fatalf("first rollout %s: %s after %d sandboxes (%v)", first, a.Outcome, a.SandboxAttempts, err)
	}
	if err := r.c.GetWorkflow(ctx, retry, "").Get(ctx, &b); err != nil || !b.Scored || b.Trajectory == nil {
		t.Fatalf("retry %s: %s, scored %v (%v)", retry, b.Outcome, b.Scored, err)
	}
	if left := testenv.Containers(t, sandbox.LabelHost, r.host); len(left) != 0 {
		t.Errorf("sandboxes left: %v", left)
	}
	// T1FLOW_RECORD_HISTORY=1 records the step's history for the replay test.
	if os.Getenv("T1FLOW_RECORD_HISTORY") == "1" {
		var h historypb.History
		it := r.c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			h.Events = append(h.Events, ev)
		}
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&h)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("testdata/ppo_retry_0001.json", b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
