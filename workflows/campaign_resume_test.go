package workflows

import (
	"context"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/campaign"
	"github.com/t1flow/t1flow/internal/task"
)

// resumeEnv is a campaign (two PPO steps, no SFT, no evals) whose trainer
// init answers kept on a resume; it records inits, inference loads and the
// PPO steps' inputs.
type resumeEnv struct {
	env   *testsuite.TestWorkflowEnvironment
	inits []gpu.InitInput
	loads []gpu.LoadInput
	steps []PPOStepInput
}

func newResumeEnv(kept bool) *resumeEnv {
	var s testsuite.WorkflowTestSuite
	r := &resumeEnv{env: s.NewTestWorkflowEnvironment()}
	env := r.env
	env.RegisterActivity(&gpu.Activities{})
	env.RegisterActivity(&activities.Activities{})
	Register(env)
	registerSweepFakes(env)
	env.OnActivity(gact.TrainerInit, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.InitInput) (gpu.Health, error) {
		r.inits = append(r.inits, in)
		return gpu.Health{OK: true, Version: 3, Kept: in.Resume && kept}, nil
	})
	env.OnActivity(gact.TrainerSave, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.SaveInput) (gpu.Checkpoint, error) {
		return gpu.Checkpoint{Name: in.Name, WeightVersion: "v4"}, nil
	})
	env.OnActivity(gact.InferenceLoadAll, mock.Anything, mock.Anything).Return(func(_ context.Context, in gpu.LoadInput) (string, error) {
		r.loads = append(r.loads, in)
		return in.Checkpoint.WeightVersion, nil
	})
	env.OnActivity(act.SampleTasks, mock.Anything, mock.Anything).Return([]task.Ref{testTask}, nil)
	env.OnActivity(act.StoreJSON, mock.Anything, mock.Anything).Return(storeOK)
	env.OnWorkflow(PPOStepWorkflow, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in PPOStepInput) (StepRecord, error) {
		r.steps = append(r.steps, in)
		return StepRecord{Step: in.Step, Trained: 1, Rollouts: 1, PolicyVersion: in.Version}, nil
	})
	return r
}

// closedAfterStep1 is a campaign's last state when it was cancelled during
// PPO step 2: step 1 and its checkpoint committed.
func closedAfterStep1() CampaignInput {
	var cfg campaign.Config
	cfg.Name, cfg.S, cfg.Policy.Init, cfg.Policy.Inference = "c", 20, "random", []string{"http://replica"}
	cfg.PPO.Steps, cfg.PPO.TasksPerStep, cfg.PPO.Concurrency, cfg.PPO.ContinueAsNewEvery = 2, 1, 1, 10
	ck := &gpu.Checkpoint{Name: "c/e1/step-0001", WeightVersion: "v3"}
	st := &CampaignState{Phase: PhasePPO, Step: 1, URLs: []string{"http://replica"}, WeightVersion: "v3", Checkpoint: ck,
		Steps: []StepRecord{{Step: 1, PolicyVersion: "v2", Checkpoint: ck.Name}}, Evals: []CheckpointEval{}, Concurrency: 1, Runs: 1, Epoch: "e1",
		Failure: nil}
	return CampaignInput{Config: cfg, State: st, Resume: true}
}

// TestCampaignResumeContinuesFromLastCheckpoint: a resumed campaign loads
// its last checkpoint into the trainer (through TrainerInit, resume) and
// inference, keeps its epoch and trains only the steps after it: with the
// trainer's own state kept, under the same keys; with the checkpoint
// reloaded, under the resume's tag, so no key committed after the
// checkpoint replays without its update.
func TestCampaignResumeContinuesFromLastCheckpoint(t *testing.T) {
	for _, kept := range []bool{true, false} {
		r := newResumeEnv(kept)
		r.env.ExecuteWorkflow(CampaignWorkflow, closedAfterStep1())
		if err := r.env.GetWorkflowError(); err != nil {
			t.Fatal(err)
		}
		var res CampaignResult
		r.env.GetWorkflowResult(&res)
		st := res.State
		if len(r.inits) != 1 || !r.inits[0].Resume || r.inits[0].Checkpoint == nil || r.inits[0].Checkpoint.Name != "c/e1/step-0001" {
			t.Fatalf("kept=%v: trainer inits %+v, want one resume from c/e1/step-0001", kept, r.inits)
		}
		if len(r.loads) == 0 || r.loads[0].Checkpoint.Name != "c/e1/step-0001" {
			t.Fatalf("kept=%v: inference loads %+v, want c/e1/step-0001 first", kept, r.loads)
		}
		wantPrefix := "c/e1/"
		if !kept {
			wantPrefix = "c/e1/resume-2/"
		}
		if len(r.steps) != 1 || r.steps[0].Step != 2 || r.steps[0].Version != "v3" || r.steps[0].KeyPrefix != wantPrefix {
			t.Fatalf("kept=%v: PPO steps run %+v, want only step 2, sampled by v3, keys under %s", kept, r.steps, wantPrefix)
		}
		if st.Phase != PhaseDone || st.Step != 2 || len(st.Steps) != 2 || st.Epoch != "e1" || len(st.Resumes) != 1 {
			t.Fatalf("kept=%v: final state %+v", kept, st)
		}
		if rr := st.Resumes[0]; rr.Kept != kept || rr.Checkpoint != "c/e1/step-0001" || rr.Step != 1 || rr.TrainerVersion != "v3" || (rr.KeyTag == "") == !kept {
			t.Fatalf("kept=%v: resume record %+v", kept, rr)
		}
	}
}
