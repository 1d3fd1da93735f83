package activities

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/sandbox"
)

// Reap removes this host's t1flow containers whose rollout workflow has
// closed (or never existed), and any older than the TTL; and, on a daemon
// shared with other hosts, their sandboxes whose rollouts closed here
// (below).
func (a *Activities) Reap(ctx context.Context, in ReapInput) (ReapResult, error) {
	if a.Sleep > 0 {
		return ReapResult{}, nil // the sleep backend makes no containers
	}
	list, err := a.Docker.List(ctx, a.Host)
	if err != nil {
		return ReapResult{}, errs.Infraf("docker ps: %v", err)
	}
	others, err := a.Docker.ListOthers(ctx, a.Host)
	if err != nil {
		return ReapResult{}, errs.Infraf("docker ps: %v", err)
	}
	var res ReapResult
	var failed *multierror.Error
	now := time.Now()
	for i, c := range append(list, others...) {
		if sandbox.OtherDeployment(c.Labels, a.Deployment) {
			continue // its workflow is in another Temporal: unknown here, not ours
		}
		var reason string
		var running *workflowservice.DescribeWorkflowExecutionResponse
		if i < len(list) {
			reason, running = a.reapReason(ctx, c.Labels, now, in.TTLSec)
		} else {
			reason = a.othersReapReason(ctx, c.Labels)
		}
		if reason == "" {
			if i < len(list) {
				res.Kept++ // this host's; another's is not ours to count
				a.cancelOrphan(ctx, c.Labels, running, &res)
			}
			continue
		}
		// One stuck container must not shield the others.
		if err := a.Docker.Remove(ctx, c.ID); err != nil {
			failed = multierror.Append(failed, err)
			continue
		}
		res.Removed = append(res.Removed, c.Name+" ("+reason+")")
		heartbeat.Record(ctx, len(res.Removed))
	}
	if err := failed.ErrorOrNil(); err != nil {
		return res, errs.Infraf("reaper removed %d, failed on %d: %v", len(res.Removed), failed.Len(), err)
	}
	return res, nil
}

// reapReason says why this host's sandbox is removed, or "" and, when its
// workflow is running, that workflow's description.
func (a *Activities) reapReason(ctx context.Context, labels map[string]string, now time.Time, ttl float64) (string, *workflowservice.DescribeWorkflowExecutionResponse) {
	if created, err := time.Parse(time.RFC3339, labels[sandbox.LabelCreated]); err == nil && ttl > 0 && now.Sub(created).Seconds() > ttl {
		return "outlived TTL", nil
	}
	wid := labels[sandbox.LabelWorkflow]
	if wid == "" || a.Temporal == nil {
		return "", nil
	}
	d, err := a.Temporal.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return "workflow not found", nil
	}
	if err != nil {
		return "", nil // unsure: keep it, the TTL still bounds its life
	}
	if d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return "workflow closed", nil
	}
	return "", d
}

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

// Eval sweeps, PPO steps and warm-ups start their rollouts ABANDON (they
// continue as new with rollouts in flight) and cancel them when they are
// cancelled or fail. One that is terminated or times out cancels nothing:
// its rollouts would run on, each holding a sandbox, with no one to report
// to, and a campaign that starts the step again would find their IDs taken.
// The reaper of the rollout's host finds them by their sandboxes and asks
// them to cancel (their own cleanup then destroys the sandbox).

// cancelOrphan cancels the running rollout d describes when its parent is
// gone, and records it in res. A rollout already asked to cancel is left
// to finish doing so; a cancel that fails is logged and tried again on the
// next run, and does not fail the reap.
func (a *Activities) cancelOrphan(ctx context.Context, labels map[string]string, d *workflowservice.DescribeWorkflowExecutionResponse, res *ReapResult) {
	if d == nil || labels[sandbox.LabelRollout] == "" || d.GetWorkflowExtendedInfo().GetCancelRequested() {
		return
	}
	why := a.orphanedBy(ctx, d)
	heartbeat.Record(ctx, len(res.Removed))
	if why == "" {
		return
	}
	wid := d.WorkflowExecutionInfo.GetExecution().GetWorkflowId()
	if err := a.Temporal.CancelWorkflow(ctx, wid, ""); err != nil {
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) { // NotFound: it closed meanwhile
			activity.GetLogger(ctx).Warn("orphaned rollout not cancelled", "rollout", wid, "parent", why, "error", err)
		}
		return
	}
	res.Cancelled = append(res.Cancelled, wid+" ("+why+")")
}

// maxResets bounds how many resets of the parent orphanedBy follows.
const maxResets = 8

// orphanedBy says how the running workflow d lost its parent ("parent
// eval/x terminated"), or "" while someone will take its result: its
// parent's run is running, or was reset (a reset run takes over its
// predecessor's children) to a run that is, or continued as new within a
// chain whose latest run is running. A chain started afresh under the
// parent's workflow ID (a step run again) does not know the rollout. Any
// error counts as not orphaned: the rollout is kept.
func (a *Activities) orphanedBy(ctx context.Context, d *workflowservice.DescribeWorkflowExecutionResponse) string {
	p := d.WorkflowExecutionInfo.GetParentExecution()
	wid := p.GetWorkflowId()
	if wid == "" || p.GetRunId() == "" {
		return ""
	}
	pd, err := a.Temporal.DescribeWorkflowExecution(ctx, wid, p.GetRunId())
	for i := 0; err == nil && i < maxResets && pd.GetWorkflowExtendedInfo().GetResetRunId() != ""; i++ {
		pd, err = a.Temporal.DescribeWorkflowExecution(ctx, wid, pd.GetWorkflowExtendedInfo().GetResetRunId())
	}
	if err != nil {
		return ""
	}
	st := pd.WorkflowExecutionInfo.GetStatus()
	if st == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		latest, err := a.Temporal.DescribeWorkflowExecution(ctx, wid, "")
		if err != nil {
			return ""
		}
		if latest.WorkflowExecutionInfo.GetFirstRunId() != pd.WorkflowExecutionInfo.GetFirstRunId() {
			return "parent " + wid + " started again since"
		}
		st = latest.WorkflowExecutionInfo.GetStatus()
	}
	if st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || st == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		return ""
	}
	return "parent " + wid + " " + strings.ToLower(strings.TrimPrefix(st.String(), "WORKFLOW_EXECUTION_STATUS_"))
}
