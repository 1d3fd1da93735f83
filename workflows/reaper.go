package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
)

// ReaperInput is one reaper run for one host.
type ReaperInput struct {
	Host   string  `json:"host"`
	TTLSec float64 `json:"ttl_sec"`
	// RetireAfterSec: when no worker takes the reap, a host with no worker
	// and no completed reap for this long is retired: its schedule is
	// deleted (0: DefaultReaperRetireAfterSec; negative: never).
	RetireAfterSec float64 `json:"retire_after_sec,omitempty"`
}

// ReaperWorkflow removes one host's leftover sandboxes; a Temporal Schedule
// per sandbox host starts it.
func ReaperWorkflow(ctx workflow.Context, in ReaperInput) (activities.ReapResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              ids.SandboxHostQueue(in.Host),
		ScheduleToStartTimeout: time.Minute,
		StartToCloseTimeout:    5 * time.Minute,
		HeartbeatTimeout:       time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 2},
		Summary:                "reap " + in.Host,
	})
	var res activities.ReapResult
	err := workflow.ExecuteActivity(ctx, act.Reap, activities.ReapInput{TTLSec: in.TTLSec}).Get(ctx, &res)
	if !scheduleToStartTimeout(err) || in.RetireAfterSec < 0 ||
		workflow.GetVersion(ctx, "reaper-retire-idle", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return res, err
	}
	// No worker on the host's queue: is the host gone for good?
	after := in.RetireAfterSec
	if after == 0 {
		after = DefaultReaperRetireAfterSec
	}
	rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: time.Minute, HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3}, Summary: "retire " + in.Host + " if gone for good",
	})
	var r activities.RetireResult
	if rerr := workflow.ExecuteActivity(rctx, act.RetireIdleHost, activities.RetireInput{Host: in.Host, AfterSec: after}).Get(ctx, &r); rerr != nil || !r.Retired {
		return res, err
	}
	workflow.GetLogger(ctx).Warn("sandbox host retired", "host", in.Host, "reason", r.Reason)
	res.Retired = r.Reason
	return res, nil
}
