package sweepstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// AuditTaskPage returns tasks [Offset, Offset+Limit) of an audit sweep's
// manifest with the similarity of those that have one (the sweep's stored
// PoolSimilarityStored answer). A missing, empty or malformed manifest is
// BadInput naming it.
func (a *Activities) AuditTaskPage(ctx context.Context, in workflows.AuditPageInput) (workflows.AuditPage, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if in.Offset < 0 || in.Limit < 1 {
		return workflows.AuditPage{}, errs.BadInputf("audit task page: offset %d, limit %d", in.Offset, in.Limit)
	}
	tasks, err := a.manifest(ctx, in.Manifest)
	if err != nil {
		return workflows.AuditPage{}, err
	}
	if in.Offset >= len(tasks) {
		return workflows.AuditPage{}, errs.BadInputf("task_manifest %s: offset %d past its %d tasks", in.Manifest.URI, in.Offset, len(tasks))
	}
	var sims map[string]audit.Similarity
	if err := store.GetJSON(ctx, a.Store, in.Similarity, &sims); err != nil {
		return workflows.AuditPage{}, errs.Infraf("audit similarity %s: %v", in.Similarity.URI, err)
	}
	page := workflows.AuditPage{Offset: in.Offset, Tasks: tasks[in.Offset:min(in.Offset+in.Limit, len(tasks))], Total: len(tasks)}
	for _, t := range page.Tasks {
		if s, ok := sims[t.ID]; ok {
			if page.Similarity == nil {
				page.Similarity = map[string]audit.Similarity{}
			}
			page.Similarity[t.ID] = s
		}
	}
	return page, nil
}

// BuildAuditReport reads an audit sweep's verdict chunks, checks that every
// task is there once, and stores the report (verdicts in manifest order)
// where the one-run sweep stored it.
func (a *Activities) BuildAuditReport(ctx context.Context, in workflows.AuditReportInput) (workflows.AuditSweepResult, error) {
	var read atomic.Int64 // chunks read: the heartbeat's details
	defer heartbeat.Every(ctx, 5*time.Second, func(context.Context) any { return read.Load() })()
	var vs []audit.Verdict
	for n := 0; n < in.Chunks; n++ {
		key := workflows.AuditChunkKey(in.RunID, n)
		ref, err := a.Store.Lookup(ctx, key)
		if err != nil {
			return workflows.AuditSweepResult{}, errs.Infraf("audit report %s: chunk %s: %v", in.RunID, key, err)
		}
		var chunk []audit.Verdict
		if err := store.GetJSON(ctx, a.Store, ref, &chunk); err != nil {
			return workflows.AuditSweepResult{}, errs.Infraf("audit report %s: %v", in.RunID, err)
		}
		vs = append(vs, chunk...)
		read.Store(int64(n + 1))
	}
	seen := make(map[string]bool, len(vs))
	for _, v := range vs {
		if seen[v.TaskID] {
			return workflows.AuditSweepResult{}, inconsistent("audit report %s: task %s (%s) has two verdicts", in.RunID, v.TaskID, v.Name)
		}
		seen[v.TaskID] = true
	}
	if len(vs) != in.Expected {
		return workflows.AuditSweepResult{}, inconsistent("audit report %s: %d verdicts in %d chunks, expected %d", in.RunID, len(vs), in.Chunks, in.Expected)
	}
	sum := workflows.SummarizeAudit(vs)
	sum.AddedToPool = in.AddedToPool
	ref, err := store.PutJSON(ctx, a.Store, workflows.AuditReportKey(in.RunID),
		workflows.AuditReport{RunID: in.RunID, KeepPool: in.KeepPool, Config: in.Config, Summary: sum, Verdicts: vs})
	if err != nil {
		return workflows.AuditSweepResult{}, errs.Infraf("store audit report %s: %v", in.RunID, err)
	}
	return workflows.AuditSweepResult{Summary: sum, Report: ref}, nil
}

// AuditResult answers how the audit in.WorkflowID closed (childOutcome).
func (a *Activities) AuditResult(ctx context.Context, in workflows.ChildResultInput) (workflows.ChildOutcome[audit.Verdict], error) {
	return childOutcome[audit.Verdict](ctx, a.Temporal, in)
}
