package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// campaignEnv is a campaign (no SFT, no evals, two PPO steps) whose PPO
// step workflow answers step(n, call) for its call-th start of step n.
func campaignEnv(t *testing.T, step func(n, call int) (StepRecord, error), initErr ...error) (*testsuite.TestWorkflowEnvironment, CampaignInput, *[]gpu.InitInput) {
	env, in, inits := campaignBaseEnv(t, []task.Ref{testTask}, initErr...)
	calls := map[int]int{}
	env.OnWorkflow(PPOStepWorkflow, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in PPOStepInput) (StepRecord, error) {
		calls[in.Step]++
		return step(in.Step, calls[in.Step])
	})
	return env, in, inits
}

// campaignBaseEnv is campaignEnv with the PPO step workflow left to the
// caller; every pool holds tasks.
func campaignBaseEnv(t *testing.T, tasks []task.Ref, initErr ...error) (*testsuite.TestWorkflowEnvironment, CampaignInput, *[]gpu.InitInput) {
	return campaignSaveEnv(t, tasks, func(in gpu.SaveInput) (gpu.Checkpoint, error) {
		return gpu.Checkpoint{Name: in.Name, WeightVersion: "v0"}, nil
	}, initErr...)
}

// storedEvents are the TensorBoard event files the campaign of the last
// campaignSaveEnv stored (the tests of this package do not run in parallel).
var storedEvents []activities.StoreEventsInput

// loaded are the versions the campaign of the last campaignSaveEnv loaded
// into inference, in order.
var loaded []string

// sampleTasks, when set after campaignSaveEnv, answers SampleTasks instead
// of its fixed tasks.
var sampleTasks func(activities.SampleInput) []task.Ref

// warmupAnswer, set before campaignSaveEnv, answers the critic warm-up
// instead of a passed gate.
var warmupAnswer func() (WarmupResult, error)

// registerFirst, set before campaignSaveEnv, registers workflows of its
// own (before any mock, as the test environment wants).
var registerFirst func(*testsuite.TestWorkflowEnvironment)

// campaignSaveEnv is campaignBaseEnv whose checkpoint saves answer save.
func campaignSaveEnv(t *testing.T, tasks []task.Ref, save func(gpu.SaveInput) (gpu.Checkpoint, error), initErr ...error) (*testsuite.TestWorkflowEnvironment, CampaignInput, *[]gpu.InitInput) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	storedEvents, loaded = nil, nil
	env.RegisterActivity(&gpu.Activities{})
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	registerSweepFakes(env)
	if registerFirst != nil {
		registerFirst(env)
		registerFirst = nil
	}
	var inits []gpu.InitInput
	env.OnActivity(gact.TrainerInit, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.InitInput) (gpu.Health, error) {
		inits = append(inits, in)
		if len(inits) <= len(initErr) {
			return gpu.Health{}, initErr[len(inits)-1]
		}
		return gpu.Health{OK: true}, nil
	})
	env.OnActivity(gact.TrainerSave, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.SaveInput) (gpu.Checkpoint, error) {
		return save(in)
	})
	env.OnActivity(gact.InferenceLoadAll, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.LoadInput) (string, error) {
		loaded = append(loaded, in.Checkpoint.WeightVersion)
		return in.Checkpoint.WeightVersion, nil
	})
	sampleTasks = nil
	env.OnActivity(act.SampleTasks, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SampleInput) ([]task.Ref, error) {
		if sampleTasks != nil {
			return sampleTasks(in), nil
		}
		return tasks, nil
	})
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(storeOK)
	env.OnActivity(act.StoreEvents, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.StoreEventsInput) (store.Ref, error) {
		storedEvents = append(storedEvents, in)
		return store.Ref{}, nil
	})
	cold, warm := -2.5, 0.75
	answer := warmupAnswer
	warmupAnswer = nil
	env.OnWorkflow(CriticWarmupWorkflow, mock.Anything, mock.Anything).Return(func(workflow.Context, WarmupInput) (WarmupResult, error) {
		if answer != nil {
			return answer()
		}
		return WarmupResult{ColdEV: &cold, WarmEV: &warm}, nil
	})
	var cfg campaign.Config
	cfg.Name, cfg.S, cfg.Policy.Init, cfg.Policy.Seed, cfg.Policy.Inference = "c", 20, "random", 5, []string{"http://replica"}
	cfg.PPO.Steps, cfg.PPO.TasksPerStep, cfg.PPO.Concurrency, cfg.PPO.ContinueAsNewEvery = 2, 1, 1, 10
	return env, CampaignInput{Config: cfg}, &inits
}

func decideLater(t *testing.T, env *testsuite.TestWorkflowEnvironment, after time.Duration, update string, seen *CampaignStatus) {
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryStatus)
		if err != nil {
			t.Error(err)
		} else if err := v.Get(seen); err != nil {
			t.Error(err)
		}
		env.UpdateWorkflow(update, update, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("%s rejected: %v", update, err) }, OnAccept: func() {}, OnComplete: func(any, error) {}})
	}, after)
}

// TestCampaignPausesOnFailedStepThenSkipOrRetry: a PPO step that fails
// (partial batch) pauses the campaign with the reason in its status; skip
// records the step as skipped and goes on; retry runs the step again.
func TestCampaignPausesOnFailedStepThenSkipOrRetry(t *testing.T) {
	partial := temporal.NewNonRetryableApplicationError("ppo step 1: 2 of 2 rollouts failed", errs.PartialBatch, nil)
	for _, update := range []string{UpdateSkip, UpdateRetry, UpdateResume} {
		t.Run(update, func(t *testing.T) {
			env, in, inits := campaignEnv(t, func(n, call int) (StepRecord, error) {
				if n == 1 && call == 1 {
					return StepRecord{}, partial
				}
				return StepRecord{Step: n, Trained: 1, Rollouts: 1}, nil
			})
			var seen CampaignStatus
			decideLater(t, env, time.Hour, update, &seen)
			env.ExecuteWorkflow(CampaignWorkflow, in)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var res CampaignResult
			env.GetWorkflowResult(&res)
			if f := seen.Failure; f == nil || f.Stage != "ppo-1" || f.Type != errs.PartialBatch || !seen.Paused {
				t.Fatalf("while paused, status %+v", seen)
			}
			st := res.State
			if st.Step != 2 || len(st.Steps) != 2 || st.Failure != nil || st.Paused {
				t.Fatalf("after %s: %+v", update, st)
			}
			if update == UpdateSkip {
				if !st.Steps[0].Skipped || st.Steps[0].Trained != 0 || len(st.Skipped) != 1 || st.Skipped[0] != "ppo-1" {
					t.Errorf("skip: steps %+v, skipped %v", st.Steps, st.Skipped)
				}
			} else if st.Steps[0].Skipped || st.Steps[0].Trained != 1 || st.Retries["ppo-1"] != 1 {
				t.Errorf("%s: steps %+v, retries %v", update, st.Steps, st.Retries)
			}
			if len(*inits) != 1 || (*inits)[0].Seed != 5 || (*inits)[0].Campaign != "c" || (*inits)[0].Checkpoint != nil {
				t.Errorf("init: %+v, want one random init with seed 5 for campaign c", *inits)
			}
		})
	}
}

// TestCampaignSkippedWarmupKeepsWhatItMeasured: a warm-up that missed its
// required gate pauses the campaign; the EVs it measured are in the status
// while paused and stay in the state after the operator skips it (the
// report read "warm EV undefined" after a skip).
func TestCampaignSkippedWarmupKeepsWhatItMeasured(t *testing.T) {
	cold, warm := -1.62, 0.691
	calls := 0
	warmupAnswer = func() (WarmupResult, error) {
		calls++
		res := WarmupResult{ColdEV: &cold, WarmEV: &warm, Rounds: 4, Aborted: 1, Gate: "missed (critic_warmup.require_gate = true): held-out explained variance 0.691 below the gate 0.700 after 4 rounds"}
		return WarmupResult{}, temporal.NewNonRetryableApplicationError("critic warm-up: held-out explained variance 0.691 below the gate 0.700 after 4 rounds", errs.WarmupGate, nil, res)
	}
	env, in, _ := campaignEnv(t, func(n, _ int) (StepRecord, error) { return StepRecord{Step: n, Trained: 1, Rollouts: 1}, nil })
	var seen CampaignStatus
	decideLater(t, env, time.Hour, UpdateSkip, &seen)
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res CampaignResult
	env.GetWorkflowResult(&res)
	if f := seen.Failure; calls != 1 || f == nil || f.Stage != "warmup" || f.Type != errs.WarmupGate || seen.WarmEV == nil || *seen.WarmEV != warm {
		t.Fatalf("while paused (warm-up ran %d times): status %+v", calls, seen)
	}
	st := res.State
	if st.WarmEV == nil || *st.WarmEV != warm || st.ColdEV == nil || *st.ColdEV != cold || !strings.HasPrefix(st.WarmupGate, "missed") || st.Aborted != 1 {
		t.Fatalf("after skip: warm %v cold %v gate %q aborted %d, want %v %v missed 1", fmtEVp(st.WarmEV), fmtEVp(st.ColdEV), st.WarmupGate, st.Aborted, warm, cold)
	}
	if len(st.Skipped) != 1 || st.Skipped[0] != "warmup" || st.Step != 2 {
		t.Fatalf("after skip: skipped %v, step %d", st.Skipped, st.Step)
	}
}

// TestCampaignInitCannotBeSkipped: a failed init (another campaign holds
// the trainer) pauses; skip is refused, retry loads it.
func TestCampaignInitCannotBeSkipped(t *testing.T) {
	env, in, inits := campaignEnv(t, func(n, _ int) (StepRecord, error) { return StepRecord{Step: n, Trained: 1}, nil },
		errs.TrainerBusyf("the trainer is held by campaign other"))
	rejected := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateSkip, "skip", &testsuite.TestUpdateCallback{OnReject: func(error) { rejected = true }, OnAccept: func() {}, OnComplete: func(any, error) {}})
	}, time.Hour)
	var seen CampaignStatus
	decideLater(t, env, 2*time.Hour, UpdateRetry, &seen)
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if calls := len(*inits); !rejected || calls != 2 || seen.Failure == nil || seen.Failure.Type != errs.TrainerBusy {
		t.Fatalf("skip rejected %v, init calls %d, status while paused %+v", rejected, calls, seen)
	}
}

// TestCampaignPausesOnARewardCollapse: with ppo.collapse_share each step is
// sent a reward floor, that share of the best earlier step's mean reward
// (none for the first step; the best, not the latest, after a dip). A retry
// after another failure keeps the floor; a step under it pauses the campaign
// (RewardCollapse), and the operator's retry of that runs it with no floor.
func TestCampaignPausesOnARewardCollapse(t *testing.T) {
	type sent struct {
		floor float64
		of    string
	}
	got := map[[2]int]sent{}
	reward := map[int]float64{1: 0.8, 2: 0.5, 3: 0.1}
	env, in, _ := campaignBaseEnv(t, []task.Ref{testTask})
	calls := map[int]int{}
	env.OnWorkflow(PPOStepWorkflow, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in PPOStepInput) (StepRecord, error) {
		calls[in.Step]++
		got[[2]int{in.Step, calls[in.Step]}] = sent{in.RewardFloor, in.FloorOf}
		if in.Step == 3 && calls[3] == 1 {
			return StepRecord{}, temporal.NewNonRetryableApplicationError("2 of 2 rollouts left out", errs.PartialBatch, nil,
				[]CarriedRollout(nil), RefusedBatch{Rollouts: 2, Aborted: 1, Failed: 1})
		}
		if in.RewardFloor > 0 && reward[in.Step] < in.RewardFloor {
			return StepRecord{}, temporal.NewNonRetryableApplicationError("under the floor", errs.RewardCollapse, nil,
				[]CarriedRollout(nil), RefusedBatch{Rollouts: 3, Stale: 1, Trained: 2})
		}
		return StepRecord{Step: in.Step, Trained: 1, Rollouts: 1, RewardMean: reward[in.Step]}, nil
	})
	in.Config.PPO.Steps, in.Config.PPO.CollapseShare = 3, 0.5
	var partial, collapse CampaignStatus
	decideLater(t, env, time.Hour, UpdateRetry, &partial)
	env.RegisterDelayedCallback(func() { // decideLater's update ID is its name: a second one needs its own
		if v, err := env.QueryWorkflow(QueryStatus); err != nil || v.Get(&collapse) != nil {
			t.Errorf("status: %v", err)
		}
		env.UpdateWorkflow(UpdateRetry, "retry-2", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("retry rejected: %v", err) }, OnAccept: func() {}, OnComplete: func(any, error) {}})
	}, 2*time.Hour)
	env.ExecuteWorkflow(CampaignWorkflow, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if f := partial.Failure; f == nil || f.Stage != "ppo-3" || f.Type != errs.PartialBatch {
		t.Fatalf("first pause: %+v", partial)
	}
	if f := collapse.Failure; f == nil || f.Stage != "ppo-3" || f.Type != errs.RewardCollapse || !collapse.Paused {
		t.Fatalf("second pause: %+v", collapse)
	}
	if g := got[[2]int{1, 1}]; g.floor != 0 {
		t.Errorf("step 1 (no earlier step) got floor %v", g.floor)
	}
	if g := got[[2]int{2, 1}]; g.floor != 0.4 || !strings.Contains(g.of, "step 1's 0.800") {
		t.Errorf("step 2 got floor %v (%s): want 0.4, half of step 1's 0.8", g.floor, g.of)
	}
	want := "collapse_share 0.5 of step 1's 0.800; its checkpoint "
	for call := 1; call <= 2; call++ { // the retry after a partial batch is still held to it
		if g := got[[2]int{3, call}]; g.floor != 0.4 || !strings.Contains(g.of, want) || !strings.Contains(g.of, "step-0001") {
			t.Errorf("step 3, call %d, got floor %v (%s): want 0.4, half of the best step's (1: 0.8, not 2: 0.5), naming its checkpoint", call, g.floor, g.of)
		}
	}
	if g, ok := got[[2]int{3, 3}]; !ok || g.floor != 0 {
		t.Errorf("step 3 retried after its collapse got floor %v (sent: %v): want none", g.floor, ok)
	}
	var res CampaignResult
	env.GetWorkflowResult(&res)
	if st := res.State; st.Step != 3 || len(st.Steps) != 3 || st.Steps[2].RewardMean != 0.1 || st.Retries["ppo-3"] != 2 ||
		len(st.FloorWaived) != 1 || st.FloorWaived[0] != "ppo-3" {
		t.Errorf("after the retries: %+v", st)
	}
	// The refused batches' rollouts count in the totals (the trained steps had none left out).
	if st := res.State; st.Aborted != 1 || st.Failed != 1 || st.Stale != 1 {
		t.Errorf("totals: aborted %d, failed %d, stale %d; want the refused batches' 1, 1, 1", st.Aborted, st.Failed, st.Stale)
	}
	// What the refused batches would have trained on counts once, not again
	// when the retried step trains its own batch.
	if st := res.State; st.Refused != 2 || partial.Refused != 0 || collapse.Refused != 2 {
		t.Errorf("refused: %d at the end, %d at the first pause, %d at the second; want 2, 0, 2 (the collapsed batch's)", st.Refused, partial.Refused, collapse.Refused)
	}
}
