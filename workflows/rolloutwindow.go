package workflows

import (
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

// rolloutWindow keeps the rollouts a workflow that continues as new has in
// flight: they are started with ParentClosePolicy ABANDON and report by
// SignalRolloutDone to the workflow's ID, which reaches its latest run.
// inFlight (rollout workflow ID -> the caller's job index) travels in the
// workflow's input from run to run; the rest belongs to one run. Eval
// sweeps (sweepwindow.go) and PPO steps and critic warm-ups
// (batchwindow.go) share it.
type rolloutWindow struct {
	inFlight map[string]int
	// started: the rollouts this run started; cancelling the run's context
	// cancels them, the others are cancelled by ID.
	started     []startedRollout
	startedHere map[string]bool
	// stopReceiving ends receive's goroutine once it has counted the
	// report it holds, and counts those left in the channel.
	stopReceiving func(ctx workflow.Context)
	// result takes each rollout's result once, after it left inFlight: its
	// report, or the failure of one that could not report.
	result func(ctx workflow.Context, r RolloutResult, job int)
	// adopted: rollouts in flight another workflow started and handed on
	// (their reports go to it): pollAdopted asks Temporal for their
	// results; stopPolling ends it (oversample.go).
	adopted     map[string]RolloutInput
	stopPolling func(ctx workflow.Context)
}

type startedRollout struct {
	f  workflow.ChildWorkflowFuture
	in RolloutInput
}

func newRolloutWindow(inFlight map[string]int, result func(ctx workflow.Context, r RolloutResult, job int)) *rolloutWindow {
	return &rolloutWindow{inFlight: inFlight, startedHere: map[string]bool{}, result: result}
}

// start starts rollout rin (ReportToParent set) as job.
func (w *rolloutWindow) start(ctx workflow.Context, rin RolloutInput, summary string, job int) {
	rin.ReportToParent = true
	wid := ids.RolloutWorkflowID(ids.RolloutID(rin.CampaignID, rin.Stage, rin.Step, rin.Task.ID, rin.Attempt))
	f := startRolloutWith(ctx, rin, summary, enumspb.PARENT_CLOSE_POLICY_ABANDON)
	w.inFlight[wid] = job
	w.started = append(w.started, startedRollout{f, rin})
	w.startedHere[wid] = true
	workflow.Go(ctx, func(ctx workflow.Context) { w.watch(ctx, f, rin) })
}

// watch counts what a rollout of this run cannot report itself: it never
// started (its ID taken), or it was terminated or timed out.
func (w *rolloutWindow) watch(ctx workflow.Context, f workflow.ChildWorkflowFuture, rin RolloutInput) {
	if err := f.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		w.received(ctx, failedOutcome(rin, err))
		return
	}
	err := f.Get(ctx, nil)
	var term *temporal.TerminatedError
	var timeout *temporal.TimeoutError
	if errors.As(err, &term) || errors.As(err, &timeout) {
		w.received(ctx, failedOutcome(rin, err))
	}
}

// earlier lists the rollouts in flight that earlier runs started, in ID
// order (this run watches its own children's closes).
func (w *rolloutWindow) earlier() []string {
	var wids []string
	for _, wid := range sortedKeys(w.inFlight) {
		if _, adopted := w.adopted[wid]; !w.startedHere[wid] && !adopted {
			wids = append(wids, wid)
		}
	}
	return wids
}

// await waits for cond. Every OrphanCheckEvery it waits in vain while
// rollouts that earlier runs started are in flight, it asks which of those
// closed without reporting and counts each as an infra error.
func (w *rolloutWindow) await(ctx workflow.Context, cond func() bool) error {
	for {
		if len(w.earlier()) == 0 { // no timer (two events) per wait when there is nothing to check
			return workflow.Await(ctx, cond)
		}
		ok, err := workflow.AwaitWithTimeout(ctx, OrphanCheckEvery, func() bool { return cond() || len(w.earlier()) == 0 })
		if err != nil || (ok && cond()) {
			return err
		}
		if ok { // the earlier runs' rollouts all reported: wait on without a timer
			continue
		}
		wids := w.earlier()
		var closed []ClosedRollout
		if err := workflow.ExecuteActivity(sweepActivityCtx(ctx, "closed rollouts"), ActivityClosedRollouts, wids).Get(ctx, &closed); err != nil {
			workflow.GetLogger(ctx).Warn("closed rollouts not checked", "error", err)
			continue
		}
		for _, c := range closed {
			// A report signalled before it closed is in history before
			// this answer and was counted: received drops this one then.
			r := failedOutcome(c.Input, temporal.NewApplicationError(fmt.Sprintf("rollout %s closed %s without reporting to its parent", c.WorkflowID, c.Status), errs.Infra))
			r.WorkflowID = c.WorkflowID
			w.received(ctx, r)
		}
	}
}

// receive takes the rollouts' reports as they come, until stopReceiving.
func (w *rolloutWindow) receive(ctx workflow.Context) {
	w.stopReceiving = receiveUntilStopped(ctx, SignalRolloutDone, func(ctx workflow.Context, r RolloutResult) { w.received(ctx, r) })
}

// receiveUntilStopped hands each signal name brings to handle, in a
// goroutine, until stop. stop lets the goroutine handle the signal it took
// from the channel (a signal taken is no longer in the channel: stopped
// any earlier, it is lost), then hands what is left in the channel to
// handle too, without blocking.
func receiveUntilStopped[T any](ctx workflow.Context, name string, handle func(ctx workflow.Context, v T)) (stop func(ctx workflow.Context)) {
	ch := workflow.GetSignalChannel(ctx, name)
	pctx, cancel := workflow.WithCancel(ctx)
	stopped, settle := workflow.NewFuture(ctx)
	workflow.Go(pctx, func(ctx workflow.Context) {
		defer settle.Set(nil, nil)
		for ctx.Err() == nil {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) {
				var v T
				c.Receive(ctx, &v)
				handle(ctx, v)
			})
			sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
			sel.Select(ctx)
		}
	})
	return func(ctx workflow.Context) {
		cancel()
		_ = stopped.Get(ctx, nil)
		for {
			var v T
			if !ch.ReceiveAsync(&v) {
				return
			}
			handle(ctx, v)
		}
	}
}

// received passes a rollout's result on once: a report of a rollout not in
// flight (reported already) is dropped.
func (w *rolloutWindow) received(ctx workflow.Context, r RolloutResult) {
	job, ok := w.inFlight[r.WorkflowID]
	if !ok {
		workflow.GetLogger(ctx).Warn("result of a rollout not in flight dropped", "rollout", r.WorkflowID)
		return
	}
	delete(w.inFlight, r.WorkflowID)
	w.result(ctx, r, job)
}

// settleStarts waits until every rollout this run started has started, or
// counts it failed (its ID taken): a run must not hand over a rollout that
// will never report.
func (w *rolloutWindow) settleStarts(ctx workflow.Context) {
	for _, st := range w.started {
		if err := st.f.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
			// watch counts it too, maybe later; received drops the second.
			w.received(ctx, failedOutcome(st.in, err))
		}
	}
}

// drain is the last step before continue-as-new: handlers finish, the
// receiver stops, and the reports still in the signal channel are taken
// (the next run would never see them).
func (w *rolloutWindow) drain(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	w.stopReceiving(ctx)
	if w.stopPolling != nil {
		w.stopPolling(ctx)
	}
	return nil
}

// cancelled cancels the rollouts earlier runs started (cancelling this
// run's context cancels its own) and returns err.
func (w *rolloutWindow) cancelled(ctx workflow.Context, err error) error {
	w.cancelInFlight(ctx, func(wid string) bool { return !w.startedHere[wid] })
	return err
}

// cancelAll asks every rollout in flight to cancel, this run's too, each
// once it has started: the SDK cancels a child through its context only
// after the child started, and one that starts after its parent closed runs
// on (started ABANDON, nothing else stops it).
func (w *rolloutWindow) cancelAll(ctx workflow.Context) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	w.settleStarts(dctx)
	w.cancelInFlight(ctx, func(string) bool { return true })
}

// cancelInFlight asks the in-flight rollouts that pick chooses to cancel,
// in ID order, and waits for the requests to be delivered.
func (w *rolloutWindow) cancelInFlight(ctx workflow.Context, pick func(string) bool) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	var fs []workflow.Future
	for _, wid := range sortedKeys(w.inFlight) {
		if pick(wid) {
			fs = append(fs, workflow.RequestCancelExternalWorkflow(dctx, wid, ""))
		}
	}
	for _, f := range fs {
		if cerr := f.Get(dctx, nil); cerr != nil {
			workflow.GetLogger(ctx).Warn("rollout not cancelled", "error", cerr)
		}
	}
}
