package workflows

import (
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

// A sweep started again under the same run (after it failed, was terminated
// or reset) starts its children under the IDs they had, and a child that
// completed under its ID is not run again: Temporal refuses the start
// (ALLOW_DUPLICATE_FAILED_ONLY), as it refuses one whose ID a running child
// holds, and the sweep reads the result of the run that holds the ID,
// waiting for it while it runs. The synthesis sweep's chains and the audit
// sweep's audits (GetVersion audit-sweep-reuse) start this way.

// ChildResultInput asks for the result of the child workflow WorkflowID,
// waiting up to WaitSeconds for it to close.
type ChildResultInput struct {
	WorkflowID  string  `json:"workflow_id"`
	WaitSeconds float64 `json:"wait_seconds"`
}

// ChildOutcome is a child's result once it closed; Closed without a Result
// is a child that failed, was terminated or timed out (Status, Error).
type ChildOutcome[T any] struct {
	Closed bool   `json:"closed"`
	Status string `json:"status,omitempty"`
	Result *T     `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ChildPollWait bounds one call of a child-result activity; ChildPollEvery
// is the pause before asking again about a child still running.
var (
	ChildPollWait  = time.Minute
	ChildPollEvery = 10 * time.Second
)

// childStarts is how often a sweep starts one child whose ID another run
// holds before it counts the child failed.
const childStarts = 3

// startReusing starts the child wf(input) with opts and settles with its
// result, or, if another run holds opts.WorkflowID, with that run's result
// (the activity named result answers it: a ChildOutcome[T]). A child whose
// holder closed without a result is started again, up to childStarts times.
func startReusing[T any](ctx workflow.Context, opts workflow.ChildWorkflowOptions, result string, wf, input any) workflow.Future {
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	cctx, wid := workflow.WithChildOptions(ctx, opts), opts.WorkflowID
	f, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for start := 1; ; start++ {
			var r T
			err := workflow.ExecuteChildWorkflow(cctx, wf, input).Get(ctx, &r)
			if !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
				settle.Set(r, err)
				return
			}
			held, err := heldChild[T](ctx, result, wid)
			switch {
			case err != nil:
				settle.Set(nil, err)
				return
			case held != nil:
				settle.Set(*held, nil)
				return
			case start == childStarts:
				settle.Set(nil, temporal.NewApplicationError(fmt.Sprintf("%s: started %d times, each refused: another run held the ID and closed without a result", wid, start), errs.Infra))
				return
			}
		}
	})
	return f
}

// heldChild waits for the run that holds a child's ID to close: its result
// if it completed, nil if it closed otherwise (the child may start again).
func heldChild[T any](ctx workflow.Context, result, wid string) (*T, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: ChildPollWait + 2*time.Minute, HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		Summary:     "result of " + wid,
	})
	for {
		var o ChildOutcome[T]
		err := workflow.ExecuteActivity(actx, result, ChildResultInput{WorkflowID: wid, WaitSeconds: ChildPollWait.Seconds()}).Get(ctx, &o)
		switch {
		case err != nil:
			return nil, err
		case o.Closed:
			return o.Result, nil
		}
		if err := workflow.Sleep(ctx, ChildPollEvery); err != nil {
			return nil, err
		}
	}
}
