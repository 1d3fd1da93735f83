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
	return res, err
}
