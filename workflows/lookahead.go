package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

// Rollouts that do not wait for the trainer (ppo.max_staleness K > 0,
// GetVersion ppo-look-ahead): once PPO step n's collection is done (the
// step signals SignalStepCollected), the campaign starts step n+1's child
// workflow at once, its rollouts sampling the weights served now while the
// trainer runs step n's update. Step n+1 judges its rollouts against the
// version step n's update produces (the served version's number plus one:
// every trainer op moves it by one), and trains only after the campaign has
// loaded that checkpoint and signalled SignalTrainOn with the version
// inference then serves. A rollout in flight when the new weights load
// goes on with them at its next turn: its segments carry both versions (a
// turn never mixes them: the server's load takes the engine lock and clears
// its prefix cache), and it trains if every segment is within K versions.
//
// One step runs ahead at most, so a rollout is at most one version behind
// the policy it trains. No step is started ahead of a continue-as-new, of
// the last step, while the campaign is paused or on a failed stage. If the
// version step n+1 was judged against never comes (step n was skipped, so
// nothing trained), step n+1 is cancelled and started again on the served
// policy: its rollouts are sampled again, never trained on a wrong label.

// Signals between a campaign and a PPO step started ahead (look-ahead.go).
const (
	SignalStepCollected = "ppo_step_collected" // step -> campaign: a StepCollected
	SignalTrainOn       = "ppo_train_on"       // campaign -> step: the version it may train on
)

// StepCollected says which start of which step has its batch: RunID is
// the step's first run, as its parent saw it start, so a signal of a step
// that was cancelled or failed and started again is not taken for the new
// start's.
type StepCollected struct {
	Step  int    `json:"step"`
	RunID string `json:"run_id"`
	// Carried: the rollouts still running that the next step adopts.
	Carried []CarriedRollout `json:"carried,omitempty"`
}

// aheadStep is a PPO step started while the previous one trained.
type aheadStep struct {
	step    int
	version string // the version its rollouts were judged against
	fut     workflow.ChildWorkflowFuture
	cancel  workflow.CancelFunc
	carried int // rollouts the step before handed on to it
}

// lookAhead says whether this campaign starts steps ahead (recorded once per
// step in the history).
func (c *campaignRun) lookAhead(ctx workflow.Context) bool {
	return c.cfg.PPO.MaxStaleness > 0 && workflow.GetVersion(ctx, "ppo-look-ahead", workflow.DefaultVersion, 1) == 1
}

// receiveCollected takes the steps' SignalStepCollected; receiving issues
// no command, so histories without the signal replay unchanged.
func (c *campaignRun) receiveCollected(ctx workflow.Context) {
	ch := workflow.GetSignalChannel(ctx, SignalStepCollected)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var s StepCollected
			if !ch.Receive(ctx, &s) {
				return
			}
			if c.collected == nil {
				c.collected = map[string]bool{}
			}
			c.collected[s.RunID] = true
			if len(s.Carried) > 0 {
				if c.carry == nil {
					c.carry = map[string][]CarriedRollout{}
				}
				c.carry[s.RunID] = s.Carried
			}
		}
	})
}

// takeAhead returns step's child if it was started ahead and may train on
// the served weights (it is signalled to), or nil: none was, or it was
// judged against a version that never came, and is cancelled.
func (c *campaignRun) takeAhead(ctx workflow.Context, step int) workflow.ChildWorkflowFuture {
	a := c.ahead
	if a == nil || a.step != step {
		return nil
	}
	c.ahead = nil
	if a.version != c.st.WeightVersion {
		workflow.GetLogger(ctx).Warn("the step started ahead expected other weights: sampling it again", "step", step, "expected", a.version, "served", c.st.WeightVersion)
		c.discardAhead(ctx, a) // cancelled, or already failed: either way it trained nothing
		return nil
	}
	// Waits for the step to have started; fails when it has closed, and its result says how.
	if err := a.fut.SignalChildWorkflow(ctx, SignalTrainOn, c.st.WeightVersion).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("the step started ahead was not signalled", "step", step, "error", err)
		if !a.fut.IsReady() {
			// Running, yet unreachable: it would wait for ever. Sample it again.
			c.discardAhead(ctx, a)
			return nil
		}
	}
	return a.fut
}

// discardAhead ends a step started ahead that will not train: what it
// adopted is counted dropped, or counted by its refused batch, and what the
// refusal left running is cancelled and counted dropped.
func (c *campaignRun) discardAhead(ctx workflow.Context, a *aheadStep) {
	left, refused := c.endAhead(ctx, a)
	if !refused {
		c.st.CarriedDropped += a.carried
	}
	c.st.CarriedDropped += len(left)
	if len(left) > 0 {
		c.cancelRollouts(ctx, distinctRollouts(left))
	}
}

// mayStartAhead: step's successor may start now (run is the awaited start
// of step, whose collection must be done).
func (c *campaignRun) mayStartAhead(ctx workflow.Context, step int, run string) bool {
	// Oversampling, a step started ahead would find the rollouts handed to
	// it two versions behind when their first turns came before the
	// handing step's version loaded: at max_staleness 1 their own
	// in-flight rollouts run while a step trains instead (oversample.go).
	return c.ahead == nil && run != "" && c.collected[run] && step < c.cfg.PPO.Steps && step%c.cfg.PPO.ContinueAsNewEvery != 0 &&
		(!c.over || c.cfg.PPO.MaxStaleness >= 2) &&
		!c.st.Paused && c.st.Failure == nil && !workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// startAhead starts PPO step next while the step before it trains. A
// failure here only means the step starts later, as it would have.
func (c *campaignRun) startAhead(ctx workflow.Context, next int, carried []CarriedRollout) {
	n, ok := gpu.VersionOf(c.st.WeightVersion)
	if !ok {
		return
	}
	tasks, need, err := c.stepTasks(ctx, next, len(carried))
	if err != nil {
		workflow.GetLogger(ctx).Warn("the next step's tasks were not drawn: it starts after this one", "step", next, "error", err)
		return
	}
	b := c.batch(tasks)
	b.MaxStaleness = c.cfg.PPO.MaxStaleness
	b.Version = fmt.Sprintf("v%d", n+1)
	b.Need, b.Carried = need, carried
	actx, cancel := workflow.WithCancel(ctx)
	cctx := cancelledChildCtx(actx, ids.PPOStepWorkflowID(c.cfg.Name, next),
		fmt.Sprintf("%s PPO step %d (rollouts started while step %d trains, on %s)", c.cfg.Name, next, next-1, c.st.WeightVersion))
	opts := workflow.GetChildWorkflowOptions(cctx)
	opts.WaitForCancellation = true // a cancelled step has closed before the step starts again under its ID
	cctx = workflow.WithChildOptions(cctx, opts)
	in := c.stepInput(ctx, b, next)
	in.NotifyParent, in.Ahead = true, true
	fut := workflow.ExecuteChildWorkflow(cctx, PPOStepWorkflow, in)
	c.ahead = &aheadStep{step: next, version: b.Version, fut: fut, cancel: cancel, carried: len(carried)}
	c.inFlight = fmt.Sprintf("ppo step %d (step %d's rollouts started ahead)", next-1, next)
	c.details(ctx)
}

// awaitStep waits for step's child; with look-ahead, it starts the next
// step's as soon as this one's collection is done.
func (c *campaignRun) awaitStep(ctx workflow.Context, step int, fut workflow.ChildWorkflowFuture, ahead bool, res *StepRecord) error {
	c.batchChild = fut // set_concurrency reaches it meanwhile
	if ahead && !fut.IsReady() {
		var exec workflow.Execution
		if err := fut.GetChildWorkflowExecution().Get(ctx, &exec); err != nil {
			return c.runBatch(ctx, fut, res) // never started: its result says why
		}
		c.stepRun = exec.RunID
		err := workflow.Await(ctx, func() bool { return fut.IsReady() || c.mayStartAhead(ctx, step, exec.RunID) })
		if err != nil {
			return err
		}
		if !fut.IsReady() && c.mayStartAhead(ctx, step, exec.RunID) {
			c.startAhead(ctx, step+1, c.carry[exec.RunID])
		}
	}
	return c.runBatch(ctx, fut, res)
}

// awaitTurn is what a step does between its collection and its update: it
// tells the campaign its collection is done (NotifyParent) and, started
// ahead, waits for the previous step's weights to be loaded. A step never
// trains on another version than the one its rollouts were judged against.
func (p *ppoStep) awaitTurn(ctx workflow.Context, rec *StepRecord) error {
	in := p.in
	if in.NotifyParent {
		if parent := workflow.GetInfo(ctx).ParentWorkflowExecution; parent != nil {
			// Best effort: without it the campaign starts the next step after this one, as before.
			info := workflow.GetInfo(ctx)
			first := info.FirstRunID
			if first == "" { // the SDK's test environment leaves it empty
				first = info.WorkflowExecution.RunID
			}
			err := workflow.SignalExternalWorkflow(ctx, parent.ID, "", SignalStepCollected, StepCollected{Step: in.Step, RunID: first, Carried: rec.CarriedRollouts}).Get(ctx, nil)
			if err != nil {
				workflow.GetLogger(ctx).Warn("the campaign was not told the step's collection is done", "step", in.Step, "error", err)
			}
		}
	}
	if !in.Ahead {
		return nil
	}
	from := workflow.Now(ctx)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("collected %d of %d rollouts ahead; waiting for step %d to train and %s to load", rec.Trained, rec.Rollouts, in.Step-1, in.Version))
	if err := workflow.Await(ctx, func() bool { return p.in.TrainOn != "" }); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rec.WaitSeconds = workflow.Now(ctx).Sub(from).Seconds()
	if p.in.TrainOn != in.Version {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"PPO step %d: its rollouts were started ahead and judged against %s, but inference serves %s: not training them on other weights",
			in.Step, in.Version, p.in.TrainOn), errs.Infra, nil)
	}
	return nil
}
