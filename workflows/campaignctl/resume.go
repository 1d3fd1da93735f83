// Package campaignctl steers campaigns from a client: the starter's
// `campaign resume` of a closed campaign, and tests.
package campaignctl

import (
	"context"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/workflows"
)

// Resumable reports whether a campaign's workflow has closed in a way that
// `campaign resume` restarts (failed, cancelled, terminated, timed out); a
// running one is resumed with the resume update instead, a completed one has
// nothing left.
func Resumable(status enumspb.WorkflowExecutionStatus) bool {
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED,
		enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return true
	}
	return false
}

// ResumeClosed starts a closed campaign again under its workflow ID, from its
// last state: the same epoch (trainer keys, checkpoint names), phase and
// step, its failure cleared, Resume set, so the new run reloads its last
// committed checkpoint before it goes on (workflows/campaign_resume.go). The
// last state comes from the closed run's resume_state query, which a worker
// answers by replaying it. It returns nil, and no error, when the campaign
// still runs (resume it with the resume update).
func ResumeClosed(ctx context.Context, c client.Client, name string) (client.WorkflowRun, *workflows.CampaignInput, error) {
	wid := ids.CampaignWorkflowID(name)
	d, err := c.DescribeWorkflowExecution(ctx, wid, "")
	if err != nil {
		return nil, nil, fmt.Errorf("campaign %s: %w", name, err)
	}
	info := d.WorkflowExecutionInfo
	status := info.Status
	if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, nil, nil
	}
	if !Resumable(status) {
		return nil, nil, errs.BadInputf("campaign %s has %s: nothing to resume (start it again for a new epoch)", name, strings.ToLower(strings.TrimPrefix(status.String(), "WORKFLOW_EXECUTION_STATUS_")))
	}
	runID := info.Execution.GetRunId()
	v, err := c.QueryWorkflow(ctx, wid, runID, workflows.QueryResumeState)
	if err != nil {
		return nil, nil, fmt.Errorf("campaign %s: reading its last state (a control worker must run to answer): %w", name, err)
	}
	var in workflows.CampaignInput
	if err := v.Get(&in); err != nil {
		return nil, nil, err
	}
	if in.State == nil {
		return nil, nil, fmt.Errorf("campaign %s: its last run has no state", name)
	}
	in.State.Failure, in.State.Paused, in.Resume = nil, false, true
	if err := awaitClosing(ctx, c, name, ClosingWait); err != nil {
		return nil, nil, err
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: wid, TaskQueue: ids.ControlQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		StaticSummary:            fmt.Sprintf("campaign %s resumed at %s, step %d/%d", name, in.State.Phase, in.State.Step, in.Config.PPO.Steps),
	}, workflows.CampaignWorkflow, in)
	if err != nil {
		return nil, nil, fmt.Errorf("campaign %s: %w", name, err)
	}
	return run, &in, nil
}

// ClosingWait bounds how long a resume waits for the closed run's PPO steps,
// warm-up and rollouts to finish closing.
var ClosingWait = 5 * time.Minute

// awaitClosing waits until no workflow of the campaign but the campaign
// itself runs: a cancelled run's rollouts close after their sandboxes are
// removed, and a resumed step that starts its rollouts again under their IDs
// while they still run would find every ID taken (each rollout counted
// failed, the step a partial batch).
func awaitClosing(ctx context.Context, c client.Client, name string, within time.Duration) error {
	q := fmt.Sprintf("CampaignID = '%s' AND ExecutionStatus = 'Running' AND WorkflowType != 'CampaignWorkflow'", name)
	deadline := time.Now().Add(within)
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: 5})
		if err != nil {
			return fmt.Errorf("campaign %s: listing the workflows of its closed run: %w", name, err)
		}
		if len(resp.Executions) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var wids []string
			for _, e := range resp.Executions {
				wids = append(wids, e.Execution.GetWorkflowId())
			}
			return fmt.Errorf("campaign %s: workflows of its closed run still run after %s (%s...): resume it once they have closed", name, within, strings.Join(wids, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
