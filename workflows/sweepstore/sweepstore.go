// Package sweepstore holds the activities that read and write the artifact
// store in terms of package workflows' types: a page of an eval sweep's task
// manifest, the report built from a sweep's result chunks, and a rollout
// record assembled from its stored turns. They live apart from package workflows
// (deterministic code, no I/O) and are called there by name.
package sweepstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// Activities are registered on the control queue's workers.
type Activities struct {
	Store store.Store
	// Temporal answers ClosedRollouts (nil: the activity fails, retried).
	Temporal client.Client

	mu        sync.Mutex
	manifests map[string][]task.Ref // by sha256: parsed once per worker
	order     []string
}

// manifestCacheSize bounds the parsed manifests a worker keeps.
const manifestCacheSize = 4

// SweepTaskPage returns tasks [Offset, Offset+Limit) of a manifest and its
// size. A missing, empty or malformed manifest is BadInput naming it.
func (a *Activities) SweepTaskPage(ctx context.Context, in workflows.TaskPageInput) (workflows.TaskPage, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if in.Offset < 0 || in.Limit < 1 {
		return workflows.TaskPage{}, errs.BadInputf("task page: offset %d, limit %d", in.Offset, in.Limit)
	}
	tasks, err := a.manifest(ctx, in.Manifest)
	if err != nil {
		return workflows.TaskPage{}, err
	}
	if in.Offset >= len(tasks) {
		return workflows.TaskPage{}, errs.BadInputf("task_manifest %s: offset %d past its %d tasks", in.Manifest.URI, in.Offset, len(tasks))
	}
	end := min(in.Offset+in.Limit, len(tasks))
	return workflows.TaskPage{Offset: in.Offset, Tasks: tasks[in.Offset:end], Total: len(tasks)}, nil
}

func (a *Activities) manifest(ctx context.Context, ref store.Ref) ([]task.Ref, error) {
	a.mu.Lock()
	tasks, ok := a.manifests[ref.SHA256]
	a.mu.Unlock()
	if ok && ref.SHA256 != "" {
		return tasks, nil
	}
	tasks, err := task.ReadManifest(ctx, a.Store, ref)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.manifests == nil {
		a.manifests = map[string][]task.Ref{}
	}
	if _, ok := a.manifests[ref.SHA256]; !ok {
		a.manifests[ref.SHA256] = tasks
		a.order = append(a.order, ref.SHA256)
		if len(a.order) > manifestCacheSize {
			delete(a.manifests, a.order[0])
			a.order = a.order[1:]
		}
	}
	return tasks, nil
}

// BuildEvalReport reads a sweep's result chunks, checks that every rollout
// is there once, and stores the report (sorted by task name and attempt).
func (a *Activities) BuildEvalReport(ctx context.Context, in workflows.EvalReportInput) (workflows.EvalSweepResult, error) {
	var read atomic.Int64 // chunks read: the heartbeat's details
	defer heartbeat.Every(ctx, 5*time.Second, func(context.Context) any { return read.Load() })()
	var rs []workflows.RolloutResult
	for n := 0; n < in.Chunks; n++ {
		key := workflows.ResultChunkKey(in.SweepID, n)
		ref, err := a.Store.Lookup(ctx, key)
		if err != nil {
			return workflows.EvalSweepResult{}, errs.Infraf("eval report %s: chunk %s: %v", in.SweepID, key, err)
		}
		var chunk []workflows.RolloutResult
		if err := store.GetJSON(ctx, a.Store, ref, &chunk); err != nil {
			return workflows.EvalSweepResult{}, errs.Infraf("eval report %s: %v", in.SweepID, err)
		}
		rs = append(rs, chunk...)
		read.Store(int64(n + 1))
	}
	if err := exactlyOnce(in, rs); err != nil {
		return workflows.EvalSweepResult{}, err
	}
	sortResults(rs)
	rep := workflows.EvalReport{
		SweepID: in.SweepID, WorkflowID: in.WorkflowID, Agent: in.Agent, Attempts: in.Attempts, S: in.S,
		Summary: workflows.Summarize(rs), Rollouts: rs,
	}
	ref, err := store.PutJSON(ctx, a.Store, workflows.EvalReportKey(in.SweepID), rep)
	if err != nil {
		return workflows.EvalSweepResult{}, errs.Infraf("store eval report %s: %v", in.SweepID, err)
	}
	return workflows.EvalSweepResult{SweepID: in.SweepID, Summary: rep.Summary, Report: ref}, nil
}

// sortResults orders a report's rollouts by task name and attempt.
func sortResults(rs []workflows.RolloutResult) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Attempt != b.Attempt {
			return a.Attempt < b.Attempt
		}
		return a.RolloutID < b.RolloutID
	})
}

// exactlyOnce: a sweep's chunks hold each rollout once and all of them. It
// is not retryable: the chunks will not change.
func exactlyOnce(in workflows.EvalReportInput, rs []workflows.RolloutResult) error {
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		if seen[r.RolloutID] {
			return inconsistent("eval report %s: rollout %s is in the results twice", in.SweepID, r.RolloutID)
		}
		seen[r.RolloutID] = true
	}
	if len(rs) != in.Expected {
		return inconsistent("eval report %s: %d results in %d chunks, expected %d", in.SweepID, len(rs), in.Chunks, in.Expected)
	}
	return nil
}

// ResultsInconsistent: a sweep's stored results lost or doubled a rollout.
const ResultsInconsistent = "ResultsInconsistent"

func inconsistent(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ResultsInconsistent, nil)
}

// BuildRolloutRecord reads the record's turns from the store and stores the
// whole record at in.Key.
func (a *Activities) BuildRolloutRecord(ctx context.Context, in workflows.RolloutRecordInput) (store.Ref, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	rec := in.Record
	rec.Turns = make([]activities.TurnResult, 0, in.Turns)
	for turn := 0; turn < in.Turns; turn++ {
		key := activities.TurnKey(in.RolloutID, in.Sandbox, turn)
		ref, err := a.Store.Lookup(ctx, key)
		if err != nil {
			return store.Ref{}, errs.Infraf("rollout record %s: turn %d (%s): %v", in.Key, turn, key, err)
		}
		var whole activities.TurnResult
		if err := store.GetJSON(ctx, a.Store, ref, &whole); err != nil {
			return store.Ref{}, errs.Infraf("rollout record %s: turn %d: %v", in.Key, turn, err)
		}
		rec.Turns = append(rec.Turns, whole)
	}
	ref, err := store.PutJSON(ctx, a.Store, in.Key, rec)
	if err != nil {
		return ref, errs.Infraf("store %s: %v", in.Key, err)
	}
	return ref, nil
}

// ClosedRollouts answers which of the rollout workflows wids are no longer
// running, each with the input it was started with, so that a sweep counts
// a rollout that closed without reporting (terminated, timed out) instead
// of waiting for it forever. A workflow this Temporal does not know (past
// its retention) is left out: the sweep keeps waiting and says so.
func (a *Activities) ClosedRollouts(ctx context.Context, wids []string) ([]workflows.ClosedRollout, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if a.Temporal == nil {
		return nil, errs.Infraf("closed rollouts: this control worker has no Temporal client")
	}
	var out []workflows.ClosedRollout
	for _, wid := range wids {
		d, err := a.Temporal.DescribeWorkflowExecution(ctx, wid, "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			activity.GetLogger(ctx).Warn("rollout unknown to Temporal; the sweep keeps waiting for it", "rollout", wid)
			continue
		}
		if err != nil {
			return nil, err
		}
		info := d.GetWorkflowExecutionInfo()
		if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			continue
		}
		it := a.Temporal.GetWorkflowHistory(ctx, wid, info.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		ev, err := it.Next()
		if err != nil {
			return nil, err
		}
		var in workflows.RolloutInput
		if err := converter.GetDefaultDataConverter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
			return nil, fmt.Errorf("rollout %s: its input: %w", wid, err)
		}
		out = append(out, workflows.ClosedRollout{WorkflowID: wid, Status: info.GetStatus().String(), Input: in})
	}
	return out, nil
}

// RolloutResults answers which of the rollout workflows have closed and
// how: a completed one with its result, any other with its status. It
// polls every two seconds, heartbeating, until one has closed (in.All:
// every one) or in.WaitSeconds have passed. A workflow Temporal does not
// know counts as closed: nothing would ever report it.
func (a *Activities) RolloutResults(ctx context.Context, in workflows.RolloutResultsInput) ([]workflows.ClosedResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if a.Temporal == nil {
		return nil, errs.Infraf("rollout results: this control worker has no Temporal client")
	}
	deadline := time.Now().Add(time.Duration(in.WaitSeconds * float64(time.Second)))
	for {
		var out []workflows.ClosedResult
		for _, wid := range in.WorkflowIDs {
			d, err := a.Temporal.DescribeWorkflowExecution(ctx, wid, "")
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				out = append(out, workflows.ClosedResult{WorkflowID: wid, Status: "NOT_FOUND", Error: "unknown to Temporal"})
				continue
			}
			if err != nil {
				return nil, err
			}
			info := d.GetWorkflowExecutionInfo()
			st := info.GetStatus()
			if st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				continue
			}
			c := workflows.ClosedResult{WorkflowID: wid, Status: st.String()}
			if st == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				var r workflows.RolloutResult
				if err := a.Temporal.GetWorkflow(ctx, wid, info.GetExecution().GetRunId()).Get(ctx, &r); err != nil {
					c.Error = err.Error()
				} else {
					c.Result = &r
				}
			} else {
				c.Error = "closed " + st.String()
			}
			out = append(out, c)
		}
		if (len(out) > 0 && (!in.All || len(out) == len(in.WorkflowIDs))) || !time.Now().Before(deadline) {
			return out, nil
		}
		activity.RecordHeartbeat(ctx, len(out))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
