package activities

import (
	"context"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// runs is a Temporal that knows some runs of one workflow ID, "p": by run
// ID, and "" for the latest. Only DescribeWorkflowExecution is served.
type runs struct {
	client.Client
	byRun map[string]*workflowservice.DescribeWorkflowExecutionResponse
}

func (r runs) DescribeWorkflowExecution(_ context.Context, wid, run string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if d, ok := r.byRun[run]; ok && wid == "p" {
		return d, nil
	}
	return nil, serviceerror.NewNotFound("no such run")
}

func run(first string, st enumspb.WorkflowExecutionStatus, resetTo string) *workflowservice.DescribeWorkflowExecutionResponse {
	return &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: st, FirstRunId: first},
		WorkflowExtendedInfo:  &workflowpb.WorkflowExecutionExtendedInfo{ResetRunId: resetTo},
	}
}

// TestOrphanedBy: a running rollout whose parent run is r1 is orphaned
// exactly when nobody will take its result.
func TestOrphanedBy(t *testing.T) {
	const (
		running    = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		terminated = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
		timedOut   = enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT
		continued  = enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
		completed  = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	)
	type known = map[string]*workflowservice.DescribeWorkflowExecutionResponse
	for _, c := range []struct {
		name string
		runs known
		want string
	}{
		{"parent running", known{"r1": run("r1", running, "")}, ""},
		{"parent terminated", known{"r1": run("r1", terminated, "")}, "parent p terminated"},
		{"parent timed out", known{"r1": run("r1", timedOut, "")}, "parent p timedout"},
		{"parent completed without it", known{"r1": run("r1", completed, "")}, "parent p completed"},
		{"continued, chain running", known{"r1": run("r1", continued, ""), "": run("r1", running, "")}, ""},
		{"continued, chain terminated", known{"r1": run("r1", continued, ""), "": run("r1", terminated, "")}, "parent p terminated"},
		{"continued, ID started again", known{"r1": run("r1", continued, ""), "": run("r9", running, "")}, "parent p started again since"},
		{"reset to a running run", known{"r1": run("r1", terminated, "r2"), "r2": run("r1", running, "")}, ""},
		{"reset, then terminated", known{"r1": run("r1", terminated, "r2"), "r2": run("r1", terminated, "")}, "parent p terminated"},
		{"reset run unknown", known{"r1": run("r1", terminated, "r2")}, ""},
		{"parent unknown", known{}, ""},
		{"continued, latest unknown", known{"r1": run("r1", continued, "")}, ""},
	} {
		a := &Activities{Temporal: runs{byRun: c.runs}}
		d := &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
			Status: running, ParentExecution: &commonpb.WorkflowExecution{WorkflowId: "p", RunId: "r1"}}}
		if got := a.orphanedBy(context.Background(), d); got != c.want {
			t.Errorf("%s: orphanedBy = %q, want %q", c.name, got, c.want)
		}
	}
	// No parent: never an orphan.
	a := &Activities{Temporal: runs{byRun: known{"r1": run("r1", terminated, "")}}}
	d := &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: running}}
	if got := a.orphanedBy(context.Background(), d); got != "" {
		t.Errorf("no parent: orphanedBy = %q, want \"\"", got)
	}
}
