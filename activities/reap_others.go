package activities

import (
	"context"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/sandbox"
)

// Sandbox workers may share one Docker daemon (several hosts on one
// machine). When one of them stops for good, its rollouts go on elsewhere
// (workflows/rollout.go) and leave its sandboxes behind: no worker of that
// host is left to destroy or reap them. A reaper of another host on the same
// daemon removes such a sandbox once its rollout is known here and closed:
// the workflow its labels name exists in this Temporal, is closed, and
// carries the same RolloutID. Anything else (a rollout still running, one
// this Temporal does not know, say of another deployment) is left to its own
// host's reaper.

// othersReapReason says why another host's sandbox is removed, or "".
func (a *Activities) othersReapReason(ctx context.Context, labels map[string]string) string {
	wid, rid := labels[sandbox.LabelWorkflow], labels[sandbox.LabelRollout]
	if wid == "" || rid == "" || a.Temporal == nil {
		return ""
	}
	d, err := a.Temporal.DescribeWorkflowExecution(ctx, wid, "")
	if err != nil || d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return ""
	}
	var got string
	sa := d.WorkflowExecutionInfo.GetSearchAttributes().GetIndexedFields()[ids.RolloutIDK.GetName()]
	if sa == nil || converter.GetDefaultDataConverter().FromPayload(sa, &got) != nil || got != rid {
		return ""
	}
	return "workflow closed; host " + labels[sandbox.LabelHost] + " did not remove it"
}
