package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// AuditInput audits one task.
type AuditInput struct {
	RunID      string           `json:"run_id"`
	Task       task.Ref         `json:"task"`
	Config     audit.Config     `json:"config"`
	Similarity audit.Similarity `json:"similarity"`
}

// AuditWorkflow scores one task on the eight dimensions. Executable checks
// run as ordinary rollouts, all at once: the reference twice in fresh
// sandboxes, the null agent, and each mutated solution.
func AuditWorkflow(ctx workflow.Context, in AuditInput) (audit.Verdict, error) {
	if in.Config.KeepScore == 0 {
		in.Config = audit.DefaultConfig()
	}
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(in.RunID), ids.Stage.ValueSet("audit"), ids.TaskID.ValueSet(in.Task.ID))
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: 5 * time.Minute, HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5,
			NonRetryableErrorTypes: []string{errs.TaskInvalid, errs.BadInput}},
		Summary: "static checks of " + in.Task.Name,
	})
	var st activities.AuditStaticResult
	if err := workflow.ExecuteActivity(actx, act.AuditStatic, activities.AuditStaticInput{Task: in.Task, Config: in.Config}).Get(ctx, &st); err != nil {
		return audit.Verdict{}, err
	}
	campaign := ids.Clean(in.RunID)
	run := func(stage string, attempt int, agent activities.AgentSpec, what string) workflow.ChildWorkflowFuture {
		return startRollout(ctx, RolloutInput{CampaignID: campaign, Stage: stage, Task: in.Task, Attempt: attempt, Agent: agent, TurnCap: 1},
			fmt.Sprintf("audit %s: %s", in.Task.Name, what))
	}
	oracle := activities.AgentSpec{Kind: activities.AgentOracle}
	futs := []workflow.ChildWorkflowFuture{
		run("audit-oracle", 1, oracle, "reference, sandbox 1"),
		run("audit-oracle", 2, oracle, "reference, sandbox 2"),
		run("audit-nop", 1, activities.AgentSpec{Kind: activities.AgentNop}, "null agent"),
	}
	for i, m := range st.Static.Mutants {
		futs = append(futs, run("audit-mutant", i+1, activities.AgentSpec{Kind: activities.AgentOracle, Solution: m.Script}, m.Description))
	}
	// Agents that should not pass, and the leak seeker (v1).
	agents := workflow.GetVersion(ctx, "audit-should-fail-agents", workflow.DefaultVersion, 1)
	scripted := map[string]int{}
	if agents >= 1 {
		for _, a := range []struct{ stage, script, what string }{
			{"audit-trivial", st.Static.Agents.Trivial, "constant outputs"},
			{"audit-shortcut", st.Static.Agents.Shortcut, "hard-coded expected literals"},
			{"audit-leak", st.Static.Agents.Leak, "leak seeker"},
		} {
			if a.script != "" {
				scripted[a.stage] = len(futs)
				futs = append(futs, run(a.stage, 1, activities.AgentSpec{Kind: activities.AgentOracle, Solution: a.script}, a.what))
			}
		}
	}
	// The optional judge model reads the instruction and tests meanwhile (v1).
	var judged workflow.Future
	if in.Config.JudgeEndpoint != "" && workflow.GetVersion(ctx, "audit-judge-model", workflow.DefaultVersion, 1) >= 1 {
		jctx := workflow.WithActivityOptions(actx, workflow.ActivityOptions{TaskQueue: ids.ControlQueue, StartToCloseTimeout: 6 * time.Minute, HeartbeatTimeout: ControlHeartbeat,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5, NonRetryableErrorTypes: []string{errs.TaskInvalid, errs.BadInput}},
			Summary:     "judge model on " + in.Task.Name})
		judged = workflow.ExecuteActivity(jctx, act.AuditJudge, activities.AuditJudgeInput{Task: in.Task, Config: in.Config})
	}
	results := make([]RolloutResult, len(futs))
	toRun := func(i int) audit.Run {
		r := rolloutOutcome(ctx, futs[i], RolloutInput{CampaignID: campaign, Task: in.Task})
		results[i] = r
		return auditRun(r)
	}
	runs := audit.Runs{Oracle: []audit.Run{toRun(0), toRun(1)}, Nop: toRun(2)}
	for i, m := range st.Static.Mutants {
		runs.Mutants = append(runs.Mutants, audit.Mutated{Description: m.Description, Run: toRun(3 + i)})
	}
	optional := func(stage string) *audit.Run {
		if i, ok := scripted[stage]; ok {
			r := toRun(i)
			return &r
		}
		return nil
	}
	runs.Trivial, runs.Shortcut, runs.Leak = optional("audit-trivial"), optional("audit-shortcut"), optional("audit-leak")
	if runs.Leak != nil && runs.Leak.Resolved && results[scripted["audit-leak"]].Record != nil {
		if err := workflow.ExecuteActivity(actx, act.AuditLeakSeen, *results[scripted["audit-leak"]].Record).Get(ctx, &runs.LeakSeen); err != nil {
			return audit.Verdict{}, err
		}
	}
	if judged != nil {
		var m audit.ModelVerdict
		if err := judged.Get(ctx, &m); err != nil {
			return audit.Verdict{}, err
		}
		runs.Model = &m
	}
	if ctx.Err() != nil {
		return audit.Verdict{}, ctx.Err()
	}
	v := audit.Judge(st.Info, st.Static, runs, in.Similarity, in.Config)
	v.Name = in.Task.Name
	sas := []temporal.SearchAttributeUpdate{ids.Reward.ValueSet(v.Score)}
	if v.Kept {
		sas = append(sas, ids.Outcome.ValueSet("kept"))
	} else {
		sas = append(sas, ids.Outcome.ValueSet("rejected"))
	}
	workflow.UpsertTypedSearchAttributes(ctx, sas...)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("score %.3f, kept %v, hard rejects %v", v.Score, v.Kept, v.HardRejects))
	return v, nil
}

// auditRun is a rollout as the audit judges it. A verifier that failed is an
// agent's 0 (verifier-error-scored), but of the reference or a probe it says
// the verifier is broken: a run the audit could not judge, as before.
func auditRun(r RolloutResult) audit.Run {
	return audit.Run{Scored: r.Scored && r.Outcome != OutcomeVerifierError, Resolved: r.Resolved, Passed: r.Passed, Total: r.Total, Outcome: r.Outcome}
}

// AuditSweepInput audits a set of tasks and keeps the good ones.
type AuditSweepInput struct {
	RunID string     `json:"run_id"`
	Tasks []task.Ref `json:"tasks"`
	// TaskManifest is a stored task.Pool holding the tasks instead (give
	// one of the two); inline tasks are moved to audits/<run>/tasks.json in
	// the first run.
	TaskManifest *store.Ref   `json:"task_manifest,omitempty"`
	Eval         []task.Ref   `json:"eval,omitempty"` // eval task sets to check contamination against
	Config       audit.Config `json:"config"`
	Concurrency  int          `json:"concurrency"`
	KeepPool     string       `json:"keep_pool,omitempty"`
	// ContinueEvery is how many tasks a run audits before it continues as
	// new (0: DefaultContinueEvery).
	ContinueEvery int `json:"continue_every,omitempty"`
	// Window is what a run hands the next; callers leave it nil.
	Window *AuditWindow `json:"window,omitempty"`
}

// Distribution summarises one dimension's scores.
type Distribution struct {
	Min     float64 `json:"min"`
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
	Buckets [5]int  `json:"buckets"` // [0,.2) [.2,.4) [.4,.6) [.6,.8) [.8,1]
}

// AuditSummary aggregates a sweep.
type AuditSummary struct {
	Audited        int                     `json:"audited"`
	Kept           int                     `json:"kept"`
	HardRejects    map[string]int          `json:"hard_rejects"`
	Flags          map[string]int          `json:"flags"`
	Dimensions     map[string]Distribution `json:"dimensions"`
	Categories     map[string]int          `json:"categories"` // of kept tasks
	SolutionLength map[string]int          `json:"solution_length"`
	AddedToPool    int                     `json:"added_to_pool"`
}

// AuditReport is the stored report with every verdict and its evidence.
type AuditReport struct {
	RunID    string          `json:"run_id"`
	KeepPool string          `json:"keep_pool"`
	Config   audit.Config    `json:"config"`
	Summary  AuditSummary    `json:"summary"`
	Verdicts []audit.Verdict `json:"verdicts"`
}

// AuditSweepResult is the summary and the report's claim check.
type AuditSweepResult struct {
	Summary AuditSummary `json:"summary"`
	Report  store.Ref    `json:"report"`
}

// AuditSweepWorkflow audits every task (bounded concurrency), after placing
// each within the pool (near duplicates) and against eval sets
// (contamination), then adds the kept tasks to the keep pool. Since
// GetVersion audit-sweep-windowed it reads its tasks a page at a time from a
// manifest, stores its verdicts in chunks and continues as new
// (auditsweep.go): a sweep of any size. Histories from before replay the
// one-run sweep below.
func AuditSweepWorkflow(ctx workflow.Context, in AuditSweepInput) (AuditSweepResult, error) {
	if workflow.GetVersion(ctx, "audit-sweep-windowed", workflow.DefaultVersion, 1) == 1 {
		return auditSweepWindowed(ctx, in)
	}
	return auditSweepInline(ctx, in)
}

// auditSweepInline is the sweep in one run: every task, similarity and
// verdict in its input, history and memory (a few thousand tasks at most).
func auditSweepInline(ctx workflow.Context, in AuditSweepInput) (AuditSweepResult, error) {
	in.defaults()
	if len(in.Tasks) == 0 {
		return AuditSweepResult{}, temporal.NewNonRetryableApplicationError("audit: no tasks", errs.BadInput, nil)
	}
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(in.RunID), ids.Stage.ValueSet("audit"))
	prog := Progress{Total: len(in.Tasks)}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return prog, nil }); err != nil {
		return AuditSweepResult{}, err
	}
	actx := auditSweepCtx(ctx)
	var sims map[string]audit.Similarity
	if err := workflow.ExecuteActivity(actx, act.PoolSimilarity, activities.SimilarityInput{Tasks: in.Tasks, Eval: in.Eval, Config: in.Config}).Get(ctx, &sims); err != nil {
		return AuditSweepResult{}, err
	}
	verdicts, err := auditTasks(ctx, in, in.Tasks, sims, false, &prog)
	if err != nil {
		return AuditSweepResult{}, err
	}
	sum := SummarizeAudit(verdicts)
	if keep := keptTasks(in.Tasks, verdicts); in.KeepPool != "" && len(keep) > 0 {
		if err := workflow.ExecuteActivity(actx, act.ImportToPool, activities.ImportInput{Pool: in.KeepPool, Tasks: keep}).Get(ctx, &sum.AddedToPool); err != nil {
			return AuditSweepResult{}, err
		}
	}
	out := AuditSweepResult{Summary: sum}
	err = workflow.ExecuteActivity(actx, act.StoreJSON, activities.StoreJSONInput{
		Key: AuditReportKey(in.RunID), Value: AuditReport{RunID: in.RunID, KeepPool: in.KeepPool, Config: in.Config, Summary: sum, Verdicts: verdicts},
	}).Get(ctx, &out.Report)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("kept %d of %d; hard rejects %v", sum.Kept, sum.Audited, sum.HardRejects))
	return out, err
}

func (in *AuditSweepInput) defaults() {
	if in.Config.KeepScore == 0 {
		in.Config = audit.DefaultConfig()
	}
	if in.Concurrency <= 0 {
		in.Concurrency = 2
	}
}

// auditSweepCtx is how an audit sweep calls its activities.
func auditSweepCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5,
			NonRetryableErrorTypes: []string{errs.TaskInvalid, errs.BadInput}},
	})
}

// auditTasks audits tasks as child AuditWorkflows, at most in.Concurrency at
// a time, and returns their verdicts in the tasks' order (a child that
// failed is a verdict flagged audit_failed, not kept). With reuse
// (audit-sweep-reuse), an audit that completed under its ID before (a sweep
// started again) is not run again and one still running is waited for: its
// verdict is read (startReusing); one that failed is started again.
func auditTasks(ctx workflow.Context, in AuditSweepInput, tasks []task.Ref, sims map[string]audit.Similarity, reuse bool, prog *Progress) ([]audit.Verdict, error) {
	verdicts := make([]audit.Verdict, len(tasks))
	err := slidingWindow(ctx, len(tasks), fixedConcurrency(in.Concurrency), &prog.Running,
		func(i int) workflow.Future {
			t := tasks[i]
			opts := workflow.ChildWorkflowOptions{WorkflowID: ids.AuditWorkflowID(in.RunID, t.ID), TaskQueue: ids.ControlQueue, StaticSummary: "audit " + t.Name}
			ain := AuditInput{RunID: in.RunID, Task: t, Config: in.Config, Similarity: sims[t.ID]}
			if reuse {
				return startReusing[audit.Verdict](ctx, opts, ActivityAuditResult, AuditWorkflow, ain)
			}
			return workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), AuditWorkflow, ain)
		},
		func(i int, f workflow.Future) {
			prog.Done++
			var v audit.Verdict
			if err := f.Get(ctx, &v); err != nil {
				v = audit.Verdict{Name: tasks[i].Name, TaskID: tasks[i].ID, HardRejects: []string{}, Flags: []string{"audit_failed: " + oneLine(err)}, Dimensions: map[string]float64{}}
			}
			if v.Kept {
				prog.Resolved++
			}
			verdicts[i] = v
		})
	return verdicts, err
}

// keptTasks are the tasks whose verdict kept them.
func keptTasks(tasks []task.Ref, verdicts []audit.Verdict) []task.Ref {
	var keep []task.Ref
	for i, v := range verdicts {
		if v.Kept {
			keep = append(keep, tasks[i])
		}
	}
	return keep
}

// AuditReportKey is where an audit sweep's report is stored.
func AuditReportKey(run string) string { return "audits/" + ids.Clean(run) + "/report.json" }

// SummarizeAudit aggregates verdicts.
func SummarizeAudit(vs []audit.Verdict) AuditSummary {
	s := AuditSummary{Audited: len(vs), HardRejects: map[string]int{}, Flags: map[string]int{}, Dimensions: map[string]Distribution{},
		Categories: map[string]int{}, SolutionLength: map[string]int{}}
	for _, d := range audit.Dimensions {
		dist := Distribution{Min: 1}
		n := 0
		for _, v := range vs {
			x, ok := v.Dimensions[d.Name]
			if !ok {
				continue
			}
			n++
			dist.Mean += x
			dist.Min, dist.Max = min(dist.Min, x), max(dist.Max, x)
			dist.Buckets[min(int(x*5), 4)]++
		}
		if n > 0 {
			dist.Mean /= float64(n)
			s.Dimensions[d.Name] = dist
		}
	}
	for _, v := range vs {
		for _, r := range v.HardRejects {
			s.HardRejects[r]++
		}
		for _, f := range v.Flags {
			s.Flags[f]++
		}
		if v.Kept {
			s.Kept++
			c := v.Category
			if c == "" {
				c = "(none)"
			}
			s.Categories[c]++
		}
		s.SolutionLength[fmt.Sprintf("%d steps", v.Steps)]++
	}
	return s
}
