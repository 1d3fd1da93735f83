package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
)

// NamedCheckpoint is a checkpoint and the label it is reported under.
type NamedCheckpoint struct {
	Label      string         `json:"label"`
	Checkpoint gpu.Checkpoint `json:"checkpoint"`
}

// CheckpointEvalInput evaluates checkpoints one after another on the same
// tasks: each is loaded into the policy's inference servers, then swept.
type CheckpointEvalInput struct {
	SweepID     string            `json:"sweep_id"`
	Checkpoints []NamedCheckpoint `json:"checkpoints"`
	// Eval is the sweep to run at every checkpoint (its SweepID is ignored);
	// its agent must be a policy, whose inference servers get the weights.
	Eval EvalSweepInput `json:"eval"`
	// Trainer, when set, is the trainer whose worker loads the checkpoints:
	// the one the campaign that saved them is pinned to (trainer_pin.go),
	// beside its inference servers and its checkpoint cache. Nil: whichever
	// GPU worker takes the shared queue.
	Trainer *gpu.TrainerRef `json:"trainer,omitempty"`
}

// CheckpointEvalResult is the comparison across checkpoints.
type CheckpointEvalResult struct {
	SweepID string           `json:"sweep_id"`
	Evals   []CheckpointEval `json:"evals"`
	Report  store.Ref        `json:"report"`
}

// CheckpointEvalWorkflow loads each checkpoint into inference and runs the
// same eval sweep against it, as a child with a deterministic ID, so a re-run
// finds finished sweeps. Rollouts sampled by any other weight version (some
// other job loaded weights meanwhile) are counted in the summary's
// policy_versions, so a mixed comparison shows.
func CheckpointEvalWorkflow(ctx workflow.Context, in CheckpointEvalInput) (CheckpointEvalResult, error) {
	out := CheckpointEvalResult{SweepID: in.SweepID, Evals: []CheckpointEval{}}
	if len(in.Checkpoints) == 0 {
		return out, temporal.NewNonRetryableApplicationError("checkpoint eval: checkpoints is empty", errs.BadInput, nil)
	}
	if in.Eval.Agent.Kind != activities.AgentPolicy {
		return out, temporal.NewNonRetryableApplicationError(fmt.Sprintf("checkpoint eval: agent %q: checkpoints are evaluated with the policy agent", in.Eval.Agent.Kind), errs.BadInput, nil)
	}
	done := 0
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) {
		return Progress{Total: len(in.Checkpoints), Done: done, Running: min(1, len(in.Checkpoints)-done)}, nil
	}); err != nil {
		return out, err
	}
	var trainer *gpu.TrainerRef
	if in.Trainer != nil && workflow.GetVersion(ctx, "checkpoint-eval-trainer", workflow.DefaultVersion, 1) == 1 {
		trainer = in.Trainer
	}
	for i, nc := range in.Checkpoints {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("checkpoint %d/%d: **%s** (%s)", i+1, len(in.Checkpoints), nc.Label, nc.Checkpoint.WeightVersion))
		var version string
		err := workflow.ExecuteActivity(trainerCtx(ctx, trainer, "load "+nc.Label+" into inference"), gact.InferenceLoadAll,
			gpu.LoadInput{Checkpoint: nc.Checkpoint, URLs: in.Eval.Agent.Inference}).Get(ctx, &version)
		if err != nil {
			return out, loaderGone(err, trainer)
		}
		sweep := in.Eval
		sweep.SweepID = ids.CheckpointSweepID(in.SweepID, i+1, nc.Label)
		cctx := cancelledChildCtx(ctx, ids.EvalSweepWorkflowID(sweep.SweepID), fmt.Sprintf("eval at checkpoint %s (%s)", nc.Label, version))
		var res EvalSweepResult
		if err := workflow.ExecuteChildWorkflow(cctx, EvalSweepWorkflow, sweep).Get(ctx, &res); err != nil {
			return out, err
		}
		out.Evals = append(out.Evals, CheckpointEval{Label: nc.Label, WeightVersion: version, Summary: res.Summary, Report: res.Report})
		done++
	}
	err := storeJSON(ctx, "store the comparison", "evals/"+ids.Clean(in.SweepID)+"/checkpoints.json", out).Get(ctx, &out.Report)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("%d checkpoints evaluated", len(out.Evals)))
	return out, err
}

// loaderGone names the pinned trainer when no worker of it took a load.
func loaderGone(err error, t *gpu.TrainerRef) error {
	if t == nil || !scheduleToStartTimeout(err) {
		return err
	}
	return errs.TrainerGonef("trainer %s took no call on its queue %s within %s: its GPU worker or host is gone. "+
		"The checkpoints are loaded on the trainer of the campaign that saved them: run the eval again once it is back", t.Name, t.Queue, TrainerWait)
}
