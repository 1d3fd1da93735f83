package workflows

import (
	"errors"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/text"
)

// act and gact are only used for method references: the SDK resolves the
// activity name.
var (
	act  *activities.Activities
	gact *gpu.Activities
)

// workflowRun is the shape of a workflow here: setup validates its input and
// sets handlers and search attributes, run does the work.
type workflowRun[R any] interface {
	setup(ctx workflow.Context) error
	run(ctx workflow.Context) (R, error)
}

func execute[R any](ctx workflow.Context, w workflowRun[R]) (R, error) {
	if err := w.setup(ctx); err != nil {
		var zero R
		return zero, err
	}
	return w.run(ctx)
}

// ControlHeartbeat is the heartbeat timeout of the control queue's
// activities, which heartbeat while they run: an attempt lost with its
// worker (killed, or its completion lost across a server restart) is
// retried after this long, not at its start-to-close timeout.
const ControlHeartbeat = 30 * time.Second

// storeJSON writes a workflow's artifact (a record or report) to the store.
func storeJSON(ctx workflow.Context, summary, key string, value any) workflow.Future {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           ids.ControlQueue,
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    ControlHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10},
		Summary:             summary,
	})
	return workflow.ExecuteActivity(actx, act.StoreJSON, activities.StoreJSONInput{Key: key, Value: value})
}

// gpuActivityCtx is how every trainer and inference call is made: long,
// heartbeated, and retried through trainer restarts (the idempotency key makes
// a retried step train once).
func gpuActivityCtx(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           ids.GPUQueue,
		StartToCloseTimeout: 4 * time.Hour,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 30, NonRetryableErrorTypes: []string{errs.BadInput}},
		Summary: summary,
	})
}

// cancelledChildCtx is for a child on the control queue that cancelling the
// parent cancels, so it cleans up.
func cancelledChildCtx(ctx workflow.Context, workflowID, summary string) workflow.Context {
	return workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: workflowID, TaskQueue: ids.ControlQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL, StaticSummary: summary})
}

func rolloutSearchAttributes(in RolloutInput, rolloutID string) []temporal.SearchAttributeUpdate {
	return []temporal.SearchAttributeUpdate{
		ids.CampaignID.ValueSet(in.CampaignID), ids.Stage.ValueSet(in.Stage),
		ids.TaskID.ValueSet(in.Task.ID), ids.RolloutIDK.ValueSet(rolloutID),
		ids.Step.ValueSet(int64(in.Step)), ids.Attempt.ValueSet(int64(in.Attempt)),
	}
}

// startRollout starts a child RolloutWorkflow with its deterministic ID and
// search attributes; cancelling the parent cancels it (so it cleans up).
func startRollout(ctx workflow.Context, rin RolloutInput, summary string) workflow.ChildWorkflowFuture {
	return startRolloutWith(ctx, rin, summary, enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL)
}

// startRolloutWith is startRollout with the policy for when the parent's
// run closes: ABANDON for a parent that continues as new with rollouts in
// flight (they report back by signal, RolloutInput.ReportToParent).
func startRolloutWith(ctx workflow.Context, rin RolloutInput, summary string, onClose enumspb.ParentClosePolicy) workflow.ChildWorkflowFuture {
	rid := ids.RolloutID(rin.CampaignID, rin.Stage, rin.Step, rin.Task.ID, rin.Attempt)
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            ids.RolloutWorkflowID(rid),
		TaskQueue:             ids.ControlQueue,
		ParentClosePolicy:     onClose,
		StaticSummary:         summary,
		TypedSearchAttributes: temporal.NewSearchAttributes(rolloutSearchAttributes(rin, rid)...),
	})
	return workflow.ExecuteChildWorkflow(cctx, RolloutWorkflow, rin)
}

// rolloutOutcome reads a finished child; a rollout that failed as a workflow
// is still counted, as infra_error or task_invalid.
func rolloutOutcome(ctx workflow.Context, f workflow.Future, rin RolloutInput) RolloutResult {
	var r RolloutResult
	if err := f.Get(ctx, &r); err != nil {
		r = failedOutcome(rin, err)
	}
	return r
}

// failedOutcome is the result of a rollout that failed as a workflow.
func failedOutcome(rin RolloutInput, err error) RolloutResult {
	rid := ids.RolloutID(rin.CampaignID, rin.Stage, rin.Step, rin.Task.ID, rin.Attempt)
	r := RolloutResult{
		RolloutID: rid, WorkflowID: ids.RolloutWorkflowID(rid), TaskID: rin.Task.ID, Name: rin.Task.Name,
		Category: rin.Task.Category, Difficulty: rin.Task.Difficulty, Attempt: rin.Attempt,
		Outcome: OutcomeInfraError, Error: oneLine(err),
	}
	if k := errorType(err); k == errs.BadInput || k == errs.TaskInvalid {
		r.Outcome = OutcomeTaskInvalid
	}
	return r
}

// errorType is the application error type behind err, "Timeout" for
// timeouts (such as a sandbox host that never came back), or "".
func errorType(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Type()
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return "Timeout"
	}
	return ""
}

// lastFailedAs reports whether an activity's last try failed with an
// application error of type typ. errorType looks through a timeout to an
// earlier try's failure (the server keeps it as the timeout's cause); this
// does not: a last try that timed out failed as a timeout.
func lastFailedAs(err error, typ string) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		switch e := err.(type) {
		case *temporal.TimeoutError:
			return false
		case *temporal.ApplicationError:
			return e.Type() == typ
		}
	}
	return false
}

func oneLine(err error) string {
	var ae *temporal.ApplicationError
	msg := err.Error()
	if errors.As(err, &ae) {
		msg = ae.Type() + ": " + ae.Message()
	}
	msg = strings.ReplaceAll(msg, "\n", " ")
	return text.Truncate(msg, 400)
}

// sortedKeys is for reports that print maps in a stable order.
func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	//workflowcheck:ignore only collects keys, sorted next
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
