package sweepstore

import (
	"context"
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/workflows"
)

// childOutcome answers how the child workflow in.WorkflowID closed: its
// result if it completed. It polls every two seconds, heartbeating, until
// the child has closed or in.WaitSeconds have passed (Closed false). A child
// Temporal does not know counts as closed without a result: the sweep starts
// it again.
func childOutcome[T any](ctx context.Context, c client.Client, in workflows.ChildResultInput) (workflows.ChildOutcome[T], error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if c == nil {
		return workflows.ChildOutcome[T]{}, errs.Infraf("result of %s: this control worker has no Temporal client", in.WorkflowID)
	}
	deadline := time.Now().Add(time.Duration(in.WaitSeconds * float64(time.Second)))
	for {
		d, err := c.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return workflows.ChildOutcome[T]{Closed: true, Status: "NOT_FOUND", Error: "unknown to Temporal"}, nil
		}
		if err != nil {
			return workflows.ChildOutcome[T]{}, err
		}
		info := d.GetWorkflowExecutionInfo()
		if st := info.GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			o := workflows.ChildOutcome[T]{Closed: true, Status: st.String()}
			var r T
			if err := c.GetWorkflow(ctx, in.WorkflowID, info.GetExecution().GetRunId()).Get(ctx, &r); err != nil {
				o.Error = err.Error()
			} else if st == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				o.Result = &r
			}
			return o, nil
		}
		if !time.Now().Before(deadline) {
			return workflows.ChildOutcome[T]{Status: info.GetStatus().String()}, nil
		}
		select {
		case <-ctx.Done():
			return workflows.ChildOutcome[T]{}, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
