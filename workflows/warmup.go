package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
)

// WarmupInput is the critic warm-up: rollouts of the frozen initial policy, then critic_fit.
type WarmupInput struct {
	RolloutBatch
	Epochs    int     `json:"epochs"` // collections per round
	FitEpochs int     `json:"fit_epochs"`
	Gate      float64 `json:"gate"`
	MaxRounds int     `json:"max_rounds"`
	// Advisory: the gate is reported but does not block PPO (config
	// critic_warmup.require_gate = false), for policies whose rollouts all
	// score the same, where EV is undefined.
	Advisory bool `json:"advisory,omitempty"`
	// CriticLR overrides the preset's critic learning rate in the fits
	// (config ppo.critic_lr; 0: the preset's).
	CriticLR float64 `json:"critic_lr,omitempty"`
	// Resume is where a run that continued as new left off (its
	// collection in progress is RolloutBatch.Window).
	Resume *WarmupResume `json:"resume,omitempty"`
}

// WarmupResume is a warm-up handed from run to run: the round and epoch in
// progress, the result so far and the round's batch of the epochs before.
type WarmupResume struct {
	Round  int                 `json:"round"`
	Epoch  int                 `json:"epoch"`
	Result WarmupResult        `json:"result"`
	Batch  []gpu.TrajectoryRef `json:"batch,omitempty"`
	Chunks []store.Ref         `json:"chunks,omitempty"`
	// Seen and SeenChunks are the rounds before's rollouts, which every
	// later round's fit takes again (warmup.pooled).
	Seen       []gpu.TrajectoryRef `json:"seen,omitempty"`
	SeenChunks []store.Ref         `json:"seen_chunks,omitempty"`
}

// WarmupRound is one round's explained variance: Before is measured on the
// round's fresh rollouts before the critic is fitted on them (held out),
// Fitted after (in sample). nil: undefined (returns without variance).
type WarmupRound struct {
	Round  int      `json:"round"`
	Before *float64 `json:"ev_before"`
	Fitted *float64 `json:"ev_fitted"`
	// Ceiling is the most EV any value that reads only the answer so far
	// reaches on this round's returns (the trainer's answer-prefix ceiling,
	// ceiling_ev_before): Before's bound, unless the critic reads the
	// prompt. nil: undefined (a trainer from before it, or returns without
	// variance).
	Ceiling *float64 `json:"ev_ceiling,omitempty"`
}

// WarmupResult records cold and warm explained variance: cold is the
// untrained critic's EV on the first rollouts, warm the held-out EV of the
// fitted critic on rollouts it was not fitted on (nil: undefined).
type WarmupResult struct {
	ColdEV *float64 `json:"cold_ev,omitempty"`
	WarmEV *float64 `json:"warm_ev,omitempty"`
	// WarmCeiling is the answer-prefix ceiling of WarmEV's round (WarmupRound.Ceiling).
	WarmCeiling *float64      `json:"warm_ceiling_ev,omitempty"`
	Rounds      int           `json:"rounds"`
	History     []WarmupRound `json:"history,omitempty"`
	// Gate says how the gate was decided, in words (passed, advisory).
	Gate    string `json:"gate,omitempty"`
	Aborted int    `json:"aborted"`
	Failed  int    `json:"failed"`
	Stale   int    `json:"stale"`
}

type warmup struct {
	in      WarmupInput
	res     WarmupResult
	running int
	starts  int // rollouts this run started, over its rounds and epochs
	width   *concurrency
	// pooled (version 2 of warmup-heldout-gate): each round fits the critic
	// on every round's rollouts so far, the earlier rounds' (seen) marked so
	// that critic_fit's held-out EV is read on the new round alone. The
	// policy is frozen, so the earlier rounds are as good a sample of its
	// returns as the new one: a round of 16 rollouts is too few for the
	// value head (docs/learning.md).
	pooled     bool
	seen       []gpu.TrajectoryRef
	seenChunks []store.Ref
}

// CriticWarmupWorkflow fits the critic on rollouts of the frozen policy until
// its explained variance on rollouts it was not fitted on reaches the gate;
// PPO starts only after that. Each round's fresh rollouts are that held-out
// set for the critic of the rounds before (critic_fit's
// explained_variance_before), so the gate is read from round 2 on. Each
// round's fit also takes every earlier round's rollouts (warmup.pooled).
func CriticWarmupWorkflow(ctx workflow.Context, in WarmupInput) (WarmupResult, error) {
	w := &warmup{in: in}
	var err error
	if w.width, err = newConcurrency(ctx, in.Concurrency, func() Progress { return Progress{Running: w.running, Concurrency: w.width.limit()} }); err != nil {
		return w.res, err
	}
	gctx := trainerCtx(ctx, in.Trainer, "")
	// Version 1 gates on held-out EV; histories before it gated on the EV of
	// the batch just fitted, and an undefined EV passed. Version 2 also fits
	// each round on the rounds before (pooled).
	v := workflow.GetVersion(ctx, "warmup-heldout-gate", workflow.DefaultVersion, 2)
	heldOut := v >= 1
	w.pooled = v >= 2
	rounds := max(in.MaxRounds, 1)
	if heldOut {
		rounds = max(in.MaxRounds, 2)
	}
	first := 1
	if in.Resume != nil {
		w.res, first = in.Resume.Result, in.Resume.Round
		w.seen, w.seenChunks = in.Resume.Seen, in.Resume.SeenChunks
	}
	for round := first; round <= rounds; round++ {
		w.res.Rounds = round
		m, err := w.round(ctx, gctx, round)
		if err != nil {
			return w.res, trainerGone(err, in.Trainer)
		}
		passed := w.inSampleGate(m)
		if heldOut {
			passed = w.heldOutGate(m, round)
		}
		if passed {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("gate passed after %d round(s)", round))
			return w.res, nil
		}
	}
	if heldOut && in.Advisory {
		w.res.Gate = "advisory (critic_warmup.require_gate = false): " + w.gateMiss()
		return w.res, nil
	}
	// The numbers ride in the error's details: a campaign whose operator
	// skips the stage still reports what the warm-up measured.
	why := w.gateMiss()
	w.res.Gate = "missed (critic_warmup.require_gate = true): " + why
	return w.res, temporal.NewNonRetryableApplicationError("critic warm-up: "+why, errs.WarmupGate, nil, w.res)
}

// round collects Epochs batches and fits the critic on them.
func (w *warmup) round(ctx, gctx workflow.Context, round int) (gpu.Metrics, error) {
	in, res := w.in, &w.res
	var batch []gpu.TrajectoryRef
	var chunks []store.Ref
	epochs, first := max(in.Epochs, 1), 0
	if r := in.Resume; r != nil && r.Round == round {
		batch, chunks, first = r.Batch, r.Chunks, r.Epoch
	}
	for e := first; e < epochs; e++ {
		col, err := collect(ctx, in.RolloutBatch, "warmup", (round-1)*epochs+e, &w.running, &w.starts, w.width, func(win *BatchWindow) error {
			next := w.in
			next.Window, next.Concurrency = win, w.width.final(ctx)
			next.Resume = &WarmupResume{Round: round, Epoch: e, Result: w.res, Batch: batch, Chunks: chunks, Seen: w.seen, SeenChunks: w.seenChunks}
			return workflow.NewContinueAsNewError(ctx, CriticWarmupWorkflow, next)
		})
		if err != nil {
			return nil, err
		}
		res.Aborted, res.Failed, res.Stale = res.Aborted+col.Aborted, res.Failed+col.Failed, res.Stale+col.Stale
		batch, chunks = append(batch, col.batch...), append(chunks, col.chunks...)
	}
	if len(batch)+len(chunks) == 0 {
		return nil, temporal.NewNonRetryableApplicationError("critic warm-up: no usable rollout", errs.PartialBatch, nil)
	}
	var m gpu.Metrics
	err := workflow.ExecuteActivity(gctx, gact.TrainerCriticFit, gpu.TrainInput{
		Key: fmt.Sprintf("%scritic/%d", in.KeyPrefix, round), Trajectories: batch, Chunks: chunks, Seen: w.seen, SeenChunks: w.seenChunks,
		Preset: in.Preset, Hyper: fitHyper(in),
	}).Get(ctx, &m)
	if err != nil || !w.pooled {
		return m, err
	}
	if _, ok := m["held_out"]; !ok && len(w.seen)+len(w.seenChunks) > 0 {
		// A trainer from before seen would have read its EV over rows it was
		// fitted on, and an in-sample EV must never open the gate.
		return m, temporal.NewNonRetryableApplicationError("critic warm-up: the trainer's critic_fit does not report held_out, so it ignored the seen trajectories "+
			"and its explained_variance_before is partly in sample; update the trainer (gpu/reference/trainer.py)", errs.BadInput, nil)
	}
	w.seen, w.seenChunks = append(w.seen, batch...), append(w.seenChunks, chunks...)
	if len(w.seen) > FlushEvery {
		// Inline refs ride in every later fit's input and continue-as-new:
		// past FlushEvery they go to the store as one chunk, as a collection's do.
		var ref store.Ref
		key := BatchChunkKey(in.RolloutBatch, "warmup-seen", round, len(w.seenChunks))
		if err := storeJSON(ctx, fmt.Sprintf("store warm-up rollouts seen (%d)", len(w.seen)), key, w.seen).Get(ctx, &ref); err != nil {
			return m, err
		}
		w.seen, w.seenChunks = nil, append(w.seenChunks, ref)
	}
	return m, nil
}

// heldOutGate reads the EV the critic of earlier rounds reaches on this
// round's rollouts, before it is fitted on them. An undefined EV (every
// return equal) is recorded as such and never passes.
func (w *warmup) heldOutGate(m gpu.Metrics, round int) bool {
	res := &w.res
	r := WarmupRound{Round: round}
	if v, ok := m.Float("explained_variance_before"); ok {
		r.Before = &v
	}
	if v, ok := m.Float("explained_variance"); ok {
		r.Fitted = &v
	}
	if v, ok := m.Float("ceiling_ev_before"); ok {
		r.Ceiling = &v
	}
	res.History = append(res.History, r)
	if round == 1 {
		res.ColdEV = r.Before
		return false
	}
	res.WarmEV, res.WarmCeiling = r.Before, r.Ceiling
	if r.Before != nil && *r.Before >= w.in.Gate {
		res.Gate = fmt.Sprintf("passed: held-out EV %.3f >= %.3f in round %d", *r.Before, w.in.Gate, round)
		return true
	}
	return false
}

// inSampleGate is the gate of histories before version 1 (kept for replay).
func (w *warmup) inSampleGate(m gpu.Metrics) bool {
	res := &w.res
	if v, ok := m.Float("explained_variance_before"); ok && res.ColdEV == nil {
		res.ColdEV = &v
	}
	v, ok := m.Float("explained_variance")
	if ok {
		res.WarmEV = &v
	}
	return !ok || v >= w.in.Gate
}

// gateMiss says why the gate did not pass, round by round.
func (w *warmup) gateMiss() string {
	var rounds []string
	for _, r := range w.res.History {
		rd := fmt.Sprintf("round %d %s", r.Round, fmtEVp(r.Before))
		if r.Ceiling != nil {
			rd += fmt.Sprintf(" (ceiling %.3f)", *r.Ceiling)
		}
		rounds = append(rounds, rd)
	}
	why := fmt.Sprintf("held-out explained variance %s below the gate %.3f after %d rounds", fmtEVp(w.res.WarmEV), w.in.Gate, w.res.Rounds)
	if w.res.WarmEV == nil {
		why = fmt.Sprintf("held-out explained variance undefined after %d rounds (every return equal: nothing for the critic to explain), which never passes the gate %.3f", w.res.Rounds, w.in.Gate)
	}
	return why + " (EV on each round's fresh rollouts before fitting: " + strings.Join(rounds, ", ") + ceilingNote(w.res.History) + ")"
}

// ceilingNote says what the ceiling in gateMiss's rounds is, when one has it.
func ceilingNote(h []WarmupRound) string {
	for _, r := range h {
		if r.Ceiling != nil {
			return "; ceiling: the most any value that reads only the answer so far explains of the round's returns: " +
				"a ceiling below the gate means no such critic passes it on that round, the data's limit, not the critic's (docs/trainer-protocol.md)"
		}
	}
	return ""
}

func fmtEVp(p *float64) string {
	if p == nil {
		return "undefined"
	}
	return fmt.Sprintf("%.3f", *p)
}

// fitHyper is what a warm-up fit sends the trainer beyond the preset.
func fitHyper(in WarmupInput) map[string]any {
	h := map[string]any{"epochs": in.FitEpochs}
	if in.CriticLR > 0 {
		h["critic_lr"] = in.CriticLR
	}
	return h
}
