package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
)

// WarmupInput is the critic warm-up: rollouts of the frozen initial policy, then critic_fit.
type WarmupInput struct {
	RolloutBatch
	Epochs    int     `json:"epochs"` // collections per round
	FitEpochs int     `json:"fit_epochs"`
	Gate      float64 `json:"gate"`
	MaxRounds int     `json:"max_rounds"`
}

// WarmupResult records cold and warm explained variance.
type WarmupResult struct {
	ColdEV  *float64 `json:"cold_ev,omitempty"`
	WarmEV  *float64 `json:"warm_ev,omitempty"`
	Rounds  int      `json:"rounds"`
	Aborted int      `json:"aborted"`
	Failed  int      `json:"failed"`
	Stale   int      `json:"stale"`
}

type warmup struct {
	in      WarmupInput
	res     WarmupResult
	running int
}

// CriticWarmupWorkflow fits the critic on rollouts of the frozen policy until
// its explained variance reaches the gate; PPO starts only after that.
func CriticWarmupWorkflow(ctx workflow.Context, in WarmupInput) (WarmupResult, error) {
	w := &warmup{in: in}
	gctx := gpuActivityCtx(ctx, "")
	for round := 1; round <= max(in.MaxRounds, 1); round++ {
		w.res.Rounds = round
		passed, err := w.round(ctx, gctx, round)
		if err != nil || passed {
			return w.res, err
		}
	}
	return w.res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("critic warm-up: explained variance %.3f below the gate %.3f after %d rounds",
		deref(w.res.WarmEV), in.Gate, w.res.Rounds), errs.WarmupGate, nil)
}

// round collects Epochs batches and fits the critic on them; it reports
// whether the gate passed.
func (w *warmup) round(ctx, gctx workflow.Context, round int) (bool, error) {
	in, res := w.in, &w.res
	var batch []gpu.TrajectoryRef
	for e := 0; e < max(in.Epochs, 1); e++ {
		col, err := collect(ctx, in.RolloutBatch, "warmup", (round-1)*max(in.Epochs, 1)+e, &w.running)
		if err != nil {
			return false, err
		}
		res.Aborted, res.Failed, res.Stale = res.Aborted+col.aborted, res.Failed+col.failed, res.Stale+col.stale
		batch = append(batch, col.batch...)
	}
	if len(batch) == 0 {
		return false, temporal.NewNonRetryableApplicationError("critic warm-up: no usable rollout", errs.PartialBatch, nil)
	}
	var m gpu.Metrics
	if err := workflow.ExecuteActivity(gctx, gact.TrainerCriticFit, gpu.TrainInput{
		Key: fmt.Sprintf("%scritic/%d", in.KeyPrefix, round), Trajectories: batch, Preset: in.Preset, Hyper: map[string]any{"epochs": in.FitEpochs},
	}).Get(ctx, &m); err != nil {
		return false, err
	}
	if v, ok := m.Float("explained_variance_before"); ok && res.ColdEV == nil {
		res.ColdEV = &v
	}
	v, ok := m.Float("explained_variance")
	if ok {
		res.WarmEV = &v
	}
	// Undefined EV (all returns equal) leaves nothing to explain: the gate passes.
	if !ok || v >= in.Gate {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("gate passed after %d round(s)", round))
		return true, nil
	}
	return false, nil
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
