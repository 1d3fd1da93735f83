package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
)

// RetireInput asks whether a sandbox host is gone for good.
type RetireInput struct {
	Host     string  `json:"host"`
	AfterSec float64 `json:"after_sec"` // gone: no worker and no reap for this long
}

// RetireResult says whether the host's reaper schedule was deleted, and why.
type RetireResult struct {
	Retired bool   `json:"retired"`
	Reason  string `json:"reason"`
}

// RetireIdleHost deletes a sandbox host's reaper schedule when the host is
// gone for good: no worker polls its queue, the schedule is older than
// AfterSec, and no reaper run of the host completed within AfterSec. A host
// that comes back creates its schedule again when its worker starts. It runs
// on the control queue (it needs only Temporal), after a reaper run found no
// worker on the host's queue.
func (a *Activities) RetireIdleHost(ctx context.Context, in RetireInput) (RetireResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if in.Host == "" || in.AfterSec <= 0 {
		return RetireResult{}, errs.BadInputf("retire idle host: host and after_sec are required")
	}
	after := time.Duration(in.AfterSec * float64(time.Second))
	q, err := a.Temporal.DescribeTaskQueue(ctx, ids.SandboxHostQueue(in.Host), enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if err != nil {
		return RetireResult{}, errs.Infraf("describe %s: %v", ids.SandboxHostQueue(in.Host), err)
	}
	if len(q.Pollers) > 0 {
		return RetireResult{Reason: "a worker polls the host's queue"}, nil
	}
	h := a.Temporal.ScheduleClient().GetHandle(ctx, ids.ReaperScheduleID(in.Host))
	d, err := h.Describe(ctx)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return RetireResult{Reason: "no reaper schedule"}, nil
	}
	if err != nil {
		return RetireResult{}, errs.Infraf("describe schedule %s: %v", ids.ReaperScheduleID(in.Host), err)
	}
	since := time.Now().Add(-after)
	if d.Info.CreatedAt.After(since) {
		return RetireResult{Reason: "the schedule is younger than " + after.String()}, nil
	}
	// Scheduled runs are reaper/<host>-<time>, manual ones reaper/<host>-manual-<n>.
	resp, err := a.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1, Query: fmt.Sprintf(
		"WorkflowType = 'ReaperWorkflow' AND ExecutionStatus = 'Completed' AND CloseTime > '%s' AND WorkflowId STARTS_WITH '%s-'",
		since.UTC().Format(time.RFC3339), ids.ReaperWorkflowID(in.Host))})
	if err != nil {
		return RetireResult{}, errs.Infraf("list reaper runs of %s: %v", in.Host, err)
	}
	if len(resp.Executions) > 0 {
		return RetireResult{Reason: "a reaper run completed within " + after.String()}, nil
	}
	if err := h.Delete(ctx); err != nil && !errors.As(err, &nf) {
		return RetireResult{}, errs.Infraf("delete schedule %s: %v", ids.ReaperScheduleID(in.Host), err)
	}
	return RetireResult{Retired: true, Reason: fmt.Sprintf("no worker on %s and no completed reaper run for %s: schedule %s deleted",
		ids.SandboxHostQueue(in.Host), after, ids.ReaperScheduleID(in.Host))}, nil
}
