// Package campaignctl steers campaigns from a client: the starter's
// `campaign resume` of a closed campaign, and tests.
package campaignctl

import (
	"context"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
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
