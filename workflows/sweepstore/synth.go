package sweepstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// BuildSynthReport reads a synthesis sweep's chain chunks, checks that every
// chain is there once and that they count what the sweep counted, and
// stores the report where the one-run sweep stored it (same shape) and the
// accepted tasks as a task.Pool (workflows.SynthTasksKey). The result lists
// the tasks inline up to workflows.SynthInlineTasks.
func (a *Activities) BuildSynthReport(ctx context.Context, in workflows.SynthReportInput) (workflows.SynthSweepResult, error) {
	var read atomic.Int64 // chunks read: the heartbeat's details
	defer heartbeat.Every(ctx, 5*time.Second, func(context.Context) any { return read.Load() })()
	var chains []workflows.SynthesisResult
	for n := 0; n < in.Chunks; n++ {
		key := workflows.SynthChunkKey(in.RunID, n)
		ref, err := a.Store.Lookup(ctx, key)
		if err != nil {
			return workflows.SynthSweepResult{}, errs.Infraf("synth report %s: chunk %s: %v", in.RunID, key, err)
		}
		var chunk []workflows.SynthesisResult
		if err := store.GetJSON(ctx, a.Store, ref, &chunk); err != nil {
			return workflows.SynthSweepResult{}, errs.Infraf("synth report %s: %v", in.RunID, err)
		}
		chains = append(chains, chunk...)
		read.Store(int64(n + 1))
	}
	rep, err := workflows.AssembleSynthReport(in, chains)
	if err != nil {
		return workflows.SynthSweepResult{}, inconsistent("%v", err)
	}
	out := workflows.SynthSweepResult{Summary: rep.Summary}
	if out.Report, err = store.PutJSON(ctx, a.Store, workflows.SynthReportKey(in.RunID), rep); err != nil {
		return out, errs.Infraf("store synth report %s: %v", in.RunID, err)
	}
	tasks := workflows.AcceptedTasks(chains)
	if len(tasks) == 0 {
		return out, nil
	}
	ref, err := store.PutJSON(ctx, a.Store, workflows.SynthTasksKey(in.RunID), task.Pool{Name: in.RunID, Tasks: tasks})
	if err != nil {
		return out, errs.Infraf("store synth tasks %s: %v", in.RunID, err)
	}
	out.TaskManifest = &ref
	if len(tasks) <= workflows.SynthInlineTasks {
		out.Tasks = tasks
	}
	return out, nil
}

// SynthesisChainResult answers how the synthesis chain in.WorkflowID closed:
// its result if it completed. It polls every two seconds, heartbeating,
// until the chain has closed or in.WaitSeconds have passed (Closed false).
// A chain Temporal does not know counts as closed without a result: the
// sweep starts it again.
func (a *Activities) SynthesisChainResult(ctx context.Context, in workflows.ChainResultInput) (workflows.ChainOutcome, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if a.Temporal == nil {
		return workflows.ChainOutcome{}, errs.Infraf("synthesis chain result: this control worker has no Temporal client")
	}
	deadline := time.Now().Add(time.Duration(in.WaitSeconds * float64(time.Second)))
	for {
		d, err := a.Temporal.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return workflows.ChainOutcome{Closed: true, Status: "NOT_FOUND", Error: "unknown to Temporal"}, nil
		}
		if err != nil {
			return workflows.ChainOutcome{}, err
		}
		info := d.GetWorkflowExecutionInfo()
		if st := info.GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			o := workflows.ChainOutcome{Closed: true, Status: st.String()}
			var r workflows.SynthesisResult
			if err := a.Temporal.GetWorkflow(ctx, in.WorkflowID, info.GetExecution().GetRunId()).Get(ctx, &r); err != nil {
				o.Error = err.Error()
			} else if st == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				o.Result = &r
			}
			return o, nil
		}
		if !time.Now().Before(deadline) {
			return workflows.ChainOutcome{Status: info.GetStatus().String()}, nil
		}
		select {
		case <-ctx.Done():
			return workflows.ChainOutcome{}, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
