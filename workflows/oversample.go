package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/task"
)

// Oversampling without the bias (ppo.oversample O, GetVersion
// ppo-oversample, needs ppo.max_staleness >= 1): a step starts
// tasks_per_step + O rollouts, counting those the previous step carried into
// it, and its collection ends once tasks_per_step of them have an outcome.
// Samples not started yet, and those waiting in an abort backoff, are
// dropped (counted); rollouts still running are not cancelled but handed
// on, in the step's SignalStepCollected and its StepRecord, to the next
// step, which adopts them into its window. Their reports go to the step
// that started them, so the adopting step asks Temporal for their results
// (ActivityRolloutResults) and judges them against its own version: a
// rollout carried once is one version behind and trains, one carried twice
// is two behind and is counted stale (CarriedStale). A rollout leaves a
// window's InFlight once, so each sample trains at most once. The last step
// starts tasks_per_step rollouts, carried ones included, and waits for all
// of them: nothing is carried off the end. A step that fails cancels what
// was carried into and out of it (a retry starts the same rollout IDs
// again), and so does a step started ahead that is sampled again; those
// are counted in CampaignState.CarriedDropped.

// adoptedJob is the window job of an adopted rollout: no sample of this
// step's tasks, never started again after an abort.
const adoptedJob = -1

// CarriedRollout is a rollout handed from one PPO step to the next.
type CarriedRollout struct {
	WorkflowID string       `json:"workflow_id"`
	Input      RolloutInput `json:"input"`
}

// ActivityRolloutResults answers a RolloutResultsInput (workflows/sweepstore).
const ActivityRolloutResults = "RolloutResults"

// RolloutResultsInput asks which of the rollout workflows have closed, and
// how: the activity polls until at least one (All: every one) has closed
// or WaitSeconds have passed, heartbeating.
type RolloutResultsInput struct {
	WorkflowIDs []string `json:"workflow_ids"`
	WaitSeconds float64  `json:"wait_seconds"`
	All         bool     `json:"all,omitempty"`
}

// ClosedResult is a closed rollout: its result when it completed, else how
// it closed.
type ClosedResult struct {
	WorkflowID string         `json:"workflow_id"`
	Status     string         `json:"status"`
	Result     *RolloutResult `json:"result,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// AdoptedPollWait bounds one ActivityRolloutResults call; AdoptedPollEvery
// is the pause after an answer with nothing closed, or a failed call.
var (
	AdoptedPollWait  = time.Minute
	AdoptedPollEvery = 10 * time.Second
)

func rolloutResultsCtx(ctx workflow.Context, wait time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           ids.ControlQueue,
		StartToCloseTimeout: wait + 2*time.Minute,
		HeartbeatTimeout:    ControlHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		Summary:             "results of carried rollouts",
	})
}

// outcome is the rollout's result, or the failure it closed with.
func (c ClosedResult) outcome(in RolloutInput) RolloutResult {
	if c.Result != nil {
		r := *c.Result
		r.WorkflowID = c.WorkflowID
		return r
	}
	r := failedOutcome(in, temporal.NewApplicationError(fmt.Sprintf("carried rollout %s closed %s: %s", c.WorkflowID, c.Status, c.Error), errs.Infra))
	r.WorkflowID = c.WorkflowID
	return r
}

// pollAdopted takes the adopted rollouts' results from Temporal as they
// close, until stopPolling.
func (w *rolloutWindow) pollAdopted(ctx workflow.Context, adopted map[string]RolloutInput) {
	w.adopted = adopted
	pctx, cancel := workflow.WithCancel(ctx)
	done, settle := workflow.NewFuture(ctx)
	workflow.Go(pctx, func(ctx workflow.Context) {
		defer settle.Set(nil, nil)
		for ctx.Err() == nil {
			var wids []string
			for _, wid := range sortedKeys(w.adopted) {
				if _, ok := w.inFlight[wid]; ok {
					wids = append(wids, wid)
				}
			}
			if len(wids) == 0 {
				return
			}
			var closed []ClosedResult
			err := workflow.ExecuteActivity(rolloutResultsCtx(ctx, AdoptedPollWait), ActivityRolloutResults,
				RolloutResultsInput{WorkflowIDs: wids, WaitSeconds: AdoptedPollWait.Seconds()}).Get(ctx, &closed)
			if err != nil && ctx.Err() == nil {
				workflow.GetLogger(ctx).Warn("results of carried rollouts not read", "error", err)
			}
			for _, c := range closed {
				w.received(ctx, c.outcome(w.adopted[c.WorkflowID]))
			}
			if (err != nil || len(closed) == 0) && workflow.Sleep(ctx, AdoptedPollEvery) != nil {
				return
			}
		}
	})
	w.stopPolling = func(ctx workflow.Context) {
		cancel()
		_ = done.Get(ctx, nil)
	}
}

// adopt puts the rollouts the previous step handed on in flight here.
func (bw *batchWindow) adopt(carried []CarriedRollout) {
	if len(carried) == 0 {
		return
	}
	bw.w.Adopted = map[string]RolloutInput{}
	for _, c := range carried {
		bw.w.InFlight[c.WorkflowID] = adoptedJob
		bw.w.Adopted[c.WorkflowID] = c.Input
	}
}

// adoptedResult counts an adopted rollout's outcome: it is never started
// again (its sample is the previous step's).
func (bw *batchWindow) adoptedResult(r RolloutResult) {
	w := bw.w
	delete(w.Adopted, r.WorkflowID)
	c := collected{BatchCounts: w.Counts}
	trained, stale := c.Trained, c.Stale
	c.add(r, bw.b)
	if c.Trained > trained {
		c.CarriedIn++
	}
	if c.Stale > stale {
		c.CarriedStale++
	}
	w.Counts, w.Pending = c.BatchCounts, append(w.Pending, c.batch...)
}

// handOn ends a collection that has Need outcomes: samples not started and
// those in an abort backoff are dropped, the rollouts still running are
// handed on.
func (bw *batchWindow) handOn(ctx workflow.Context) collected {
	w := bw.w
	bw.rw.settleStarts(ctx) // one that never started is counted, not handed on
	bw.rw.stopReceiving(ctx)
	if bw.rw.stopPolling != nil {
		bw.rw.stopPolling(ctx)
	}
	w.Counts.Dropped += len(bw.b.Tasks) - w.Next + len(w.Ready) + len(w.Backoff)
	w.Next, w.Ready, w.Backoff = len(bw.b.Tasks), nil, nil
	var carried []CarriedRollout
	for _, wid := range sortedKeys(w.InFlight) {
		in, ok := w.Adopted[wid]
		if i := w.InFlight[wid]; i != adoptedJob || !ok {
			in = bw.input(i)
		}
		carried = append(carried, CarriedRollout{WorkflowID: wid, Input: in})
		delete(w.InFlight, wid) // a late report of it is dropped here
	}
	w.Adopted = nil
	*bw.status = 0
	out := bw.collected()
	out.carried = carried
	return out
}

// countTurns adds r to the turn histograms of the finished rollouts and,
// when it trained (Trained grew past trained), of the trained ones.
func (c *collected) countTurns(r RolloutResult, trained int) {
	c.TurnsFinished = bump(c.TurnsFinished, r.Turns)
	if c.Trained > trained {
		c.TurnsTrained = bump(c.TurnsTrained, r.Turns)
	}
}

// bump counts one more at k in histogram h.
func bump(h []int, k int) []int {
	for len(h) <= k {
		h = append(h, 0)
	}
	h[k]++
	return h
}

// oversampling says whether step's rollouts oversample (recorded once per
// step in the history); only with look-ahead.
func (c *campaignRun) oversampling(ctx workflow.Context, ahead bool) bool {
	return ahead && c.cfg.PPO.Oversample > 0 && workflow.GetVersion(ctx, "ppo-oversample", workflow.DefaultVersion, 1) == 1
}

// stepTasks draws step's new tasks and says how many outcomes it needs,
// given the rollouts carried into it: tasks_per_step + O in all before the
// last step, tasks_per_step (and every one awaited) at the last.
func (c *campaignRun) stepTasks(ctx workflow.Context, step, carried int) ([]task.Ref, int, error) {
	n, need := c.cfg.PPO.TasksPerStep, 0
	if c.over {
		n -= carried
		if step < c.cfg.PPO.Steps {
			n, need = n+c.cfg.PPO.Oversample, c.cfg.PPO.TasksPerStep
		}
	}
	if n <= 0 {
		return nil, need, nil // SampleTasks answers N = 0 with the whole pool
	}
	tasks, err := c.poolTasks(ctx, c.cfg.Pools.Train, n, step)
	return tasks, need, err
}

// handedOn keeps what step handed on in the campaign's state, unless the
// step started ahead adopted it: the next step to start takes it.
func (c *campaignRun) handedOn(step int, res *StepRecord) {
	if !c.over {
		return
	}
	c.st.Carried = nil // the step took what was carried into it
	if c.ahead == nil || c.ahead.step != step+1 {
		c.st.Carried = res.CarriedRollouts
	}
	res.CarriedRollouts = nil
}

// dropCarried: step failed. What was carried into it and out of it is
// cancelled, with the step started ahead (which adopted what it handed on),
// and waited for until closed (a retry starts the same rollout IDs), and
// counted dropped. refused is what a step that refused its batch
// (PartialBatch, RewardCollapse) would have carried on: it told no one
// before it failed. counted: that step's counts reached the totals
// (countRefused), the carried-in rollouts that reported to it among them, so
// only what still ran (refused) is dropped of those: each outcome is counted
// once. A step started ahead is ended even when nothing was carried
// (GetVersion drop-ahead-uncarried): a retry of step would otherwise find
// it started from the failed attempt, hand it nothing, and its refusal
// (one that came before the retry) would pause the campaign again.
func (c *campaignRun) dropCarried(ctx workflow.Context, refused []CarriedRollout, counted bool) {
	in, adopted := c.st.Carried, c.carry[c.stepRun]
	c.st.Carried = nil
	if len(distinctRollouts(in, adopted, refused)) == 0 &&
		(c.ahead == nil || workflow.GetVersion(ctx, "drop-ahead-uncarried", workflow.DefaultVersion, 1) == workflow.DefaultVersion) {
		return
	}
	cancel := slices.Concat(in, adopted, refused)
	if counted {
		in = nil
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if a := c.ahead; a != nil {
		c.ahead = nil
		if left, refusedAhead := c.endAhead(dctx, a); refusedAhead {
			adopted = left // it counted those that reported to it; these still ran
			cancel = append(cancel, left...)
		}
	}
	c.st.CarriedDropped += len(distinctRollouts(in, adopted, refused))
	if wids := distinctRollouts(cancel); len(wids) > 0 {
		c.cancelRollouts(dctx, wids)
	}
}

// endAhead cancels a step started ahead. One cancelled cancelled what it
// adopted (a.carried of them, dropped); one that had refused its batch
// (refused) counted those that reported to it (countRefused) and names the
// ones still running in its error (left, for the caller to cancel and count;
// histories from before it leave them running).
func (c *campaignRun) endAhead(ctx workflow.Context, a *aheadStep) (left []CarriedRollout, refused bool) {
	a.cancel()
	err := a.fut.Get(ctx, nil)
	if !c.countRefused(err) {
		return nil, false
	}
	if left = carriedOf(err); len(left) > 0 && workflow.GetVersion(ctx, "ahead-refused-left", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		left = nil
	}
	return left, true
}

// distinctRollouts is the workflow IDs of lists' rollouts, each once, in
// their first order.
func distinctRollouts(lists ...[]CarriedRollout) []string {
	seen := map[string]bool{}
	var wids []string
	for _, cr := range slices.Concat(lists...) {
		if !seen[cr.WorkflowID] {
			seen[cr.WorkflowID] = true
			wids = append(wids, cr.WorkflowID)
		}
	}
	return wids
}

// carriedOf is the still-running rollouts a failed step's error carries
// (a refused batch's), or none.
func carriedOf(err error) []CarriedRollout {
	var ae *temporal.ApplicationError
	var out []CarriedRollout
	if errors.As(err, &ae) && ae.HasDetails() && ae.Details(&out) != nil {
		return nil
	}
	return out
}

// RefusedBatch is a refused batch's second error detail (PartialBatch,
// RewardCollapse; the first is what it would have carried on): its
// rollouts' counts, which the campaign adds to its totals as it does a
// trained step's; Trained is those the step would have trained on
// (CampaignState.Refused). A step from before it sends none: zero, and one
// from before Trained sends no Trained.
type RefusedBatch struct {
	Rollouts int `json:"rollouts"`
	Aborted  int `json:"aborted"`
	Failed   int `json:"failed"`
	Stale    int `json:"stale"`
	Trained  int `json:"trained,omitempty"`
}

func refused(rec StepRecord) RefusedBatch {
	return RefusedBatch{Rollouts: rec.Rollouts, Aborted: rec.Aborted, Failed: rec.Failed, Stale: rec.Stale, Trained: rec.Trained}
}

// countRefused adds a refused batch's aborted, failed and stale rollouts to
// the campaign's totals, and those it would have trained on to Refused:
// they happened, whatever the operator decides next.
// Any other outcome of a step (nil, cancelled, another failure) adds nothing
// (false).
func (c *campaignRun) countRefused(err error) bool {
	var ae *temporal.ApplicationError
	var carried []CarriedRollout
	var r RefusedBatch
	if !errors.As(err, &ae) || (ae.Type() != errs.PartialBatch && ae.Type() != errs.RewardCollapse) ||
		!ae.HasDetails() || ae.Details(&carried, &r) != nil {
		return false
	}
	c.excluded(r.Aborted, r.Failed, r.Stale)
	c.st.Refused += r.Trained
	return true
}

// cancelRollouts asks the rollouts to cancel and waits (up to 10 minutes)
// until they have closed.
func (c *campaignRun) cancelRollouts(ctx workflow.Context, wids []string) {
	var fs []workflow.Future
	for _, wid := range wids {
		fs = append(fs, workflow.RequestCancelExternalWorkflow(ctx, wid, ""))
	}
	for _, f := range fs {
		_ = f.Get(ctx, nil) // one closed already cannot be cancelled
	}
	wait := 10 * time.Minute
	var closed []ClosedResult
	err := workflow.ExecuteActivity(rolloutResultsCtx(ctx, wait), ActivityRolloutResults, RolloutResultsInput{WorkflowIDs: wids, WaitSeconds: wait.Seconds(), All: true}).Get(ctx, &closed)
	if err != nil || len(closed) < len(wids) {
		workflow.GetLogger(ctx).Warn("carried rollouts cancelled, not all closed", "rollouts", len(wids), "closed", len(closed), "error", err)
	}
}

// TurnStats are the mean and the 90th percentile of a turn histogram
// (StepRecord.TurnsTrained, TurnsFinished), and how many it counts.
func TurnStats(h []int) (n int, mean float64, p90 int) {
	sum := 0
	for k, c := range h {
		n, sum = n+c, sum+k*c
	}
	if n == 0 {
		return 0, 0, 0
	}
	seen := 0
	for k, c := range h {
		if seen += c; 10*seen >= 9*n {
			p90 = k
			break
		}
	}
	return n, float64(sum) / float64(n), p90
}

// OversampleText says what a step carried, adopted and dropped, and the
// turns of its trained against its finished rollouts ("" without
// oversampling).
func OversampleText(r StepRecord) string {
	if r.Carried == 0 && r.CarriedIn == 0 && r.Dropped == 0 && r.TurnsFinished == nil {
		return ""
	}
	tn, tm, tp := TurnStats(r.TurnsTrained)
	fn, fm, fp := TurnStats(r.TurnsFinished)
	return fmt.Sprintf("; oversampled: carried on %d, carried in and trained %d, carried in stale %d, dropped %d; turns of trained %d: mean %.1f p90 %d, of finished %d: mean %.1f p90 %d",
		r.Carried, r.CarriedIn, r.CarriedStale, r.Dropped, tn, tm, tp, fn, fm, fp)
}

// oversampleScalars adds, under ppo.oversample, the step's carried, adopted
// and dropped counts and the mean and p90 turns of trained and finished
// rollouts to its TensorBoard tags.
func oversampleScalars(s StepRecord, out map[string]float64) {
	if s.TurnsFinished == nil && s.Carried == 0 && s.Dropped == 0 {
		return
	}
	out["rollout/carried"], out["rollout/carried_in"], out["rollout/carried_stale"], out["rollout/dropped"] =
		float64(s.Carried), float64(s.CarriedIn), float64(s.CarriedStale), float64(s.Dropped)
	_, tm, tp := TurnStats(s.TurnsTrained)
	_, fm, fp := TurnStats(s.TurnsFinished)
	out["rollout/turns_trained_mean"], out["rollout/turns_trained_p90"] = tm, float64(tp)
	out["rollout/turns_finished_mean"], out["rollout/turns_finished_p90"] = fm, float64(fp)
}
