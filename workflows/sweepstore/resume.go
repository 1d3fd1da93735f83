package sweepstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// LatestResults are a sweep's results as its latest report has them: round
// n-1's resume report for round n > 1, else the sweep's report, else (a
// sweep that failed or was cancelled before its report) its result chunks.
// where says which it read.
func LatestResults(ctx context.Context, st store.Store, sweepID string, round int) (rs []workflows.RolloutResult, where string, err error) {
	key := workflows.EvalReportKey(sweepID)
	if round > 1 {
		key = workflows.EvalResumeReportKey(sweepID, round-1)
	}
	ref, err := st.Lookup(ctx, key)
	switch {
	case err == nil:
		var rep workflows.EvalReport
		if err := store.GetJSON(ctx, st, ref, &rep); err != nil {
			return nil, key, errs.Infraf("resume %s: %v", sweepID, err)
		}
		return rep.Rollouts, key, nil
	case !errors.Is(err, store.ErrNotFound):
		return nil, key, errs.Infraf("resume %s: %s: %v", sweepID, key, err)
	case round > 1:
		return nil, key, errs.BadInputf("resume %s round %d: round %d has no report (%s): resume that round first", sweepID, round, round-1, key)
	}
	for n := 0; ; n++ {
		ck := workflows.ResultChunkKey(sweepID, n)
		ref, err := st.Lookup(ctx, ck)
		if errors.Is(err, store.ErrNotFound) {
			return rs, fmt.Sprintf("%d result chunks (the sweep has no report)", n), nil
		}
		if err != nil {
			return nil, ck, errs.Infraf("resume %s: %s: %v", sweepID, ck, err)
		}
		var chunk []workflows.RolloutResult
		if err := store.GetJSON(ctx, st, ref, &chunk); err != nil {
			return nil, ck, errs.Infraf("resume %s: %v", sweepID, err)
		}
		rs = append(rs, chunk...)
	}
}

// PlanEvalResume decides what round in.Round reruns: every task × attempt
// of the manifest without a result (unfinished), and every one whose
// result's error type is in in.ErrorTypes (or, in.UnscoredVerifierErrors,
// is an unscored verifier_error); the other results are kept (stored at
// EvalResumeKeptKey).
func (a *Activities) PlanEvalResume(ctx context.Context, in workflows.ResumePlanInput) (workflows.ResumePlan, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	if err := workflows.CheckErrorTypes(in.ErrorTypes); err != nil {
		return workflows.ResumePlan{}, errs.BadInputf("resume %s: %v", in.SweepID, err)
	}
	tasks, err := a.manifest(ctx, in.Manifest)
	if err != nil {
		return workflows.ResumePlan{}, err
	}
	rs, _, err := LatestResults(ctx, a.Store, in.SweepID, in.Round)
	if err != nil {
		return workflows.ResumePlan{}, err
	}
	type job struct {
		task    string
		attempt int
	}
	have := make(map[job]workflows.RolloutResult, len(rs))
	for _, r := range rs {
		have[job{r.TaskID, r.Attempt}] = r
	}
	var plan workflows.ResumePlan
	kept := []workflows.RolloutResult{}
	for attempt := 1; attempt <= in.Attempts; attempt++ {
		for _, t := range tasks {
			r, ok := have[job{t.ID, attempt}]
			if ok && !rerun(in, r) {
				kept = append(kept, r)
				continue
			}
			j := workflows.ResumeJob{Task: t, Attempt: attempt}
			if ok {
				j.Replaces = r.ErrorType()
			}
			plan.Jobs = append(plan.Jobs, j)
		}
	}
	if len(plan.Jobs) > workflows.MaxResumeReruns {
		return workflows.ResumePlan{}, errs.BadInputf("resume %s: %d rollouts to rerun, more than one resume takes (%d): filter by error type (--filter-error-type) or start a new sweep",
			in.SweepID, len(plan.Jobs), workflows.MaxResumeReruns)
	}
	plan.KeptCount = len(kept)
	if plan.Kept, err = store.PutJSON(ctx, a.Store, workflows.EvalResumeKeptKey(in.SweepID, in.Round), kept); err != nil {
		return workflows.ResumePlan{}, errs.Infraf("resume %s: store kept results: %v", in.SweepID, err)
	}
	return plan, nil
}

// rerun reports whether a resume reruns result r: its error type is one
// asked for, or (a default resume) it is a verifier_error recorded unscored,
// before verifier-error-scored.
func rerun(in workflows.ResumePlanInput, r workflows.RolloutResult) bool {
	return slices.Contains(in.ErrorTypes, r.ErrorType()) ||
		in.UnscoredVerifierErrors && r.Outcome == workflows.OutcomeVerifierError && !r.Scored
}

// BuildResumeReport stores the report over the kept results and the
// reruns' at EvalResumeReportKey, checking each rollout is there once.
func (a *Activities) BuildResumeReport(ctx context.Context, in workflows.ResumeReportInput) (workflows.EvalSweepResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	var kept, reruns []workflows.RolloutResult
	for _, p := range []struct {
		ref  store.Ref
		into *[]workflows.RolloutResult
	}{{in.Kept, &kept}, {in.Reruns, &reruns}} {
		if err := store.GetJSON(ctx, a.Store, p.ref, p.into); err != nil {
			return workflows.EvalSweepResult{}, errs.Infraf("resume report %s: %v", in.SweepID, err)
		}
	}
	rs := append(kept, reruns...)
	if err := exactlyOnce(in.EvalReportInput, rs); err != nil {
		return workflows.EvalSweepResult{}, err
	}
	sortResults(rs)
	rep := workflows.EvalReport{
		SweepID: in.SweepID, WorkflowID: in.WorkflowID, Agent: in.Agent, Attempts: in.Attempts, S: in.S,
		Summary: workflows.Summarize(rs), Rollouts: rs,
	}
	ref, err := store.PutJSON(ctx, a.Store, workflows.EvalResumeReportKey(in.SweepID, in.Round), rep)
	if err != nil {
		return workflows.EvalSweepResult{}, errs.Infraf("store resume report %s: %v", in.SweepID, err)
	}
	return workflows.EvalSweepResult{SweepID: in.SweepID, Summary: rep.Summary, Report: ref}, nil
}
