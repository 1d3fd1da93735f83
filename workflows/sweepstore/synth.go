package sweepstore

import (
	"context"
	"sync/atomic"
	"time"

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

// SynthesisChainResult answers how the synthesis chain in.WorkflowID closed
// (childOutcome).
func (a *Activities) SynthesisChainResult(ctx context.Context, in workflows.ChildResultInput) (workflows.ChildOutcome[workflows.SynthesisResult], error) {
	return childOutcome[workflows.SynthesisResult](ctx, a.Temporal, in)
}
