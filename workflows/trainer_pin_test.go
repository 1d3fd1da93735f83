package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// pinnedEnv is campaignBaseEnv whose trainer claims answer trainers[i] for
// the i-th claim (the last one after that); queues records the queue of
// every trainer and inference call, and steps the PPO step inputs.
func pinnedEnv(t *testing.T, save func(gpu.SaveInput) (gpu.Checkpoint, error), info func() error, trainers ...string) (env *testsuite.TestWorkflowEnvironment, in CampaignInput, queues *[]string, steps *[]PPOStepInput) {
	env, in, _ = campaignSaveEnv(t, []task.Ref{testTask}, save)
	in.Config.Policy.Inference = nil // the trainer's own inference server
	claims := 0
	env.OnActivity(gact.TrainerClaim, mock.Anything, mock.Anything).Return(func(_ context.Context, campaign string) (gpu.TrainerRef, error) {
		name := trainers[min(claims, len(trainers)-1)]
		claims++
		return gpu.TrainerRef{Name: name, Queue: ids.TrainerQueue(name)}, nil
	})
	env.OnActivity(gact.InferenceInfo, mock.Anything).Return(func(ctx context.Context) (gpu.InferenceInfo, error) {
		if err := info(); err != nil {
			return gpu.InferenceInfo{}, err
		}
		return gpu.InferenceInfo{URLs: []string{"http://" + activity.GetInfo(ctx).TaskQueue}, WeightVersion: "v0"}, nil
	})
	queues, steps = &[]string{}, &[]PPOStepInput{}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if n := info.ActivityType.Name; strings.HasPrefix(n, "Trainer") || strings.HasPrefix(n, "Inference") {
			*queues = append(*queues, n+"@"+info.TaskQueue)
		}
	})
	env.OnWorkflow(PPOStepWorkflow, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in PPOStepInput) (StepRecord, error) {
		*steps = append(*steps, in)
		return StepRecord{Step: in.Step, Trained: 1, Rollouts: 1}, nil
	})
	return env, in, queues, steps
}

func saved(in gpu.SaveInput) (gpu.Checkpoint, error) {
	return gpu.Checkpoint{Name: in.Name, WeightVersion: "v0"}, nil
}

func noErr() error { return nil }

// notTaken is what Temporal reports when no worker takes a call in time.
func notTaken() error { return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil) }

// TestCampaignPinnedToItsTrainer: the claim runs on the shared GPU queue;
// every later trainer and inference call goes to the claimed trainer's own
// queue, the PPO steps carry that trainer, the inference URL is that
// trainer's server, and the status names the trainer.
func TestCampaignPinnedToItsTrainer(t *testing.T) {
	env, in, queues, steps := pinnedEnv(t, saved, noErr, "gpu-b", "gpu-a")
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res CampaignResult
	env.GetWorkflowResult(&res)
	own := ids.TrainerQueue("gpu-b")
	if len(*queues) < 4 || (*queues)[0] != "TrainerClaim@"+ids.GPUQueue {
		t.Fatalf("trainer calls %v: want TrainerClaim on %s first", *queues, ids.GPUQueue)
	}
	for _, q := range (*queues)[1:] {
		if !strings.HasSuffix(q, "@"+own) {
			t.Errorf("trainer call %s: want every call after the claim on %s (all: %v)", q, own, *queues)
		}
	}
	if len(*steps) != 2 {
		t.Fatalf("PPO steps %d, want 2", len(*steps))
	}
	for _, s := range *steps {
		if s.Trainer == nil || s.Trainer.Queue != own {
			t.Errorf("PPO step %d runs on trainer %+v, want %s", s.Step, s.Trainer, own)
		}
	}
	if tr := res.State.Trainer; tr == nil || tr.Name != "gpu-b" || len(res.State.URLs) != 1 || res.State.URLs[0] != "http://"+own {
		t.Errorf("state: trainer %+v, inference %v; want gpu-b and its own server", tr, res.State.URLs)
	}
}

// TestCampaignPausesWhenItsTrainerIsGone: a checkpoint save that no worker
// of the pinned trainer takes (schedule-to-start timeout) pauses the
// campaign with TrainerGone naming the trainer and its queue; a retry waits
// for the same trainer (it holds the steps' weights), never another.
func TestCampaignPausesWhenItsTrainerIsGone(t *testing.T) {
	saves := 0
	save := func(in gpu.SaveInput) (gpu.Checkpoint, error) {
		if strings.HasSuffix(in.Name, "step-0001") {
			if saves++; saves == 1 {
				return gpu.Checkpoint{}, notTaken()
			}
		}
		return saved(in)
	}
	env, in, queues, _ := pinnedEnv(t, save, noErr, "gpu-b", "gpu-a")
	var seen CampaignStatus
	decideLater(t, env, time.Hour, UpdateRetry, &seen)
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	f := seen.Failure
	if f == nil || f.Type != errs.TrainerGone || !seen.Paused || !strings.Contains(f.Reason, "gpu-b") || !strings.Contains(f.Reason, ids.TrainerQueue("gpu-b")) {
		t.Fatalf("while paused: %+v, want a TrainerGone failure naming gpu-b and its queue", seen)
	}
	if seen.Trainer != "gpu-b" || saves != 2 {
		t.Errorf("status names trainer %q, step 1 saved %d times; want gpu-b, 2 (the retry)", seen.Trainer, saves)
	}
	for _, q := range (*queues)[1:] {
		if !strings.HasSuffix(q, "@"+ids.TrainerQueue("gpu-b")) {
			t.Errorf("trainer call %s after the claim, want all on gpu-b's queue", q)
		}
	}
}

// TestCampaignInitClaimsAnotherTrainerWhenItsTrainerIsGone: a trainer gone
// during the init (nothing trained on it yet) pauses the campaign with
// TrainerGone; the retry claims a trainer afresh and pins the campaign to it.
func TestCampaignInitClaimsAnotherTrainerWhenItsTrainerIsGone(t *testing.T) {
	infos := 0
	info := func() error {
		if infos++; infos == 1 {
			return notTaken()
		}
		return nil
	}
	env, in, queues, steps := pinnedEnv(t, saved, info, "gpu-b", "gpu-a")
	var seen CampaignStatus
	decideLater(t, env, time.Hour, UpdateRetry, &seen)
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if f := seen.Failure; f == nil || f.Stage != "init" || f.Type != errs.TrainerGone || !strings.Contains(f.Reason, "gpu-b") {
		t.Fatalf("while paused: %+v, want init failed with TrainerGone naming gpu-b", seen)
	}
	var res CampaignResult
	env.GetWorkflowResult(&res)
	if tr := res.State.Trainer; tr == nil || tr.Name != "gpu-a" {
		t.Fatalf("pinned to %+v after the retry, want gpu-a", tr)
	}
	want := []string{"TrainerClaim@" + ids.GPUQueue, "InferenceInfo@" + ids.TrainerQueue("gpu-b"), "TrainerClaim@" + ids.GPUQueue}
	if len(*queues) < 4 || strings.Join((*queues)[:3], " ") != strings.Join(want, " ") {
		t.Fatalf("trainer calls %v, want %v first", *queues, want)
	}
	for _, q := range (*queues)[3:] {
		if !strings.HasSuffix(q, "@"+ids.TrainerQueue("gpu-a")) {
			t.Errorf("trainer call %s after the second claim, want all on gpu-a's queue", q)
		}
	}
	for _, s := range *steps {
		if s.Trainer == nil || s.Trainer.Name != "gpu-a" {
			t.Errorf("PPO step %d on trainer %+v, want gpu-a", s.Step, s.Trainer)
		}
	}
}

// checkpointEvalEnv runs a checkpoint eval of two checkpoints whose loads
// answer load; queues records the queue of every load.
func checkpointEvalEnv(t *testing.T, load func() error) (*testsuite.TestWorkflowEnvironment, CheckpointEvalInput, *[]string) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterActivity(&gpu.Activities{})
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	env.OnActivity(gact.InferenceLoadAll, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.LoadInput) (string, error) {
		return in.Checkpoint.WeightVersion, load()
	})
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(store.Ref{URI: "file:///r"}, nil)
	env.OnWorkflow(EvalSweepWorkflow, mock.Anything, mock.Anything).Return(EvalSweepResult{}, nil)
	queues := &[]string{}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if n := info.ActivityType.Name; strings.HasPrefix(n, "Inference") {
			*queues = append(*queues, n+"@"+info.TaskQueue)
		}
	})
	in := CheckpointEvalInput{SweepID: "s", Eval: EvalSweepInput{Tasks: []task.Ref{testTask},
		Agent: activities.AgentSpec{Kind: activities.AgentPolicy, Inference: []string{"http://gpu-b:30000"}}},
		Checkpoints: []NamedCheckpoint{{Label: "c:init", Checkpoint: gpu.Checkpoint{Name: "c/e1/init", WeightVersion: "v0"}},
			{Label: "c:step-0001", Checkpoint: gpu.Checkpoint{Name: "c/e1/step-0001", WeightVersion: "v1"}}}}
	return env, in, queues
}

// TestCheckpointEvalLoadsOnItsCampaignsTrainer: a checkpoint eval of a
// campaign's checkpoints loads each on the trainer that campaign is pinned
// to (its queue), not on whichever GPU worker takes the shared queue; one
// with no trainer named loads on the shared queue; a trainer that takes no
// load fails the eval with TrainerGone naming it.
func TestCheckpointEvalLoadsOnItsCampaignsTrainer(t *testing.T) {
	own := ids.TrainerQueue("gpu-b")
	for _, tc := range []struct {
		trainer *gpu.TrainerRef
		queue   string
	}{{&gpu.TrainerRef{Name: "gpu-b", Queue: own}, own}, {nil, ids.GPUQueue}} {
		env, in, queues := checkpointEvalEnv(t, noErr)
		in.Trainer = tc.trainer
		env.ExecuteWorkflow(CheckpointEvalWorkflow, in)
		if err := env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		want := "InferenceLoadAll@" + tc.queue
		if len(*queues) != 2 || (*queues)[0] != want || (*queues)[1] != want {
			t.Errorf("trainer %+v: loads %v, want both as %s", tc.trainer, *queues, want)
		}
	}

	env, in, _ := checkpointEvalEnv(t, notTaken)
	in.Trainer = &gpu.TrainerRef{Name: "gpu-b", Queue: own}
	env.ExecuteWorkflow(CheckpointEvalWorkflow, in)
	var ae *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &ae) || ae.Type() != errs.TrainerGone || !strings.Contains(ae.Message(), "gpu-b") {
		t.Errorf("a load its trainer never took: %v, want TrainerGone naming gpu-b", err)
	}
}
