package workflows

import (
	"fmt"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

type evalSweep struct {
	in       EvalSweepInput
	progress Progress
	results  []RolloutResult
}

// EvalSweepWorkflow runs tasks × attempts as child RolloutWorkflows in a
// sliding window of at most Concurrency at a time, then stores the report.
func EvalSweepWorkflow(ctx workflow.Context, in EvalSweepInput) (EvalSweepResult, error) {
	s := &evalSweep{in: in}
	if err := s.setup(ctx); err != nil {
		return EvalSweepResult{}, err
	}
	return s.run(ctx)
}

func (s *evalSweep) setup(ctx workflow.Context) error {
	if s.in.Attempts <= 0 {
		s.in.Attempts = 1
	}
	if s.in.Concurrency <= 0 {
		s.in.Concurrency = DefaultEvalConcurrency
	}
	if s.in.TurnCap <= 0 {
		s.in.TurnCap = EvalTurnCap
	}
	if s.in.S <= 0 {
		s.in.S = DefaultS
	}
	if s.in.SweepID == "" {
		s.in.SweepID = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	if len(s.in.Tasks) == 0 {
		return temporal.NewNonRetryableApplicationError("eval sweep: tasks is empty", errs.BadInput, nil)
	}
	if err := s.in.Agent.Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), errs.BadInput, nil)
	}
	s.progress.Total = len(s.in.Tasks) * s.in.Attempts
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return s.progress, nil }); err != nil {
		return err
	}
	return workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(s.in.SweepID), ids.Stage.ValueSet("eval"))
}

func (s *evalSweep) run(ctx workflow.Context) (EvalSweepResult, error) {
	type job struct {
		task    int
		attempt int
	}
	var jobs []job
	for a := 1; a <= s.in.Attempts; a++ {
		for i := range s.in.Tasks {
			jobs = append(jobs, job{i, a})
		}
	}
	err := slidingWindow(ctx, len(jobs), func() int { return s.in.Concurrency }, &s.progress.Running,
		func(i int) workflow.Future {
			j := jobs[i]
			t := s.in.Tasks[j.task]
			rin := RolloutInput{
				CampaignID: s.in.SweepID, Stage: "eval", Step: 0, Task: t, Attempt: j.attempt,
				Agent: s.in.Agent, TurnCap: s.in.TurnCap, S: s.in.S, AgentTimeoutSec: s.in.AgentTimeoutSec,
			}
			return startRollout(ctx, rin, fmt.Sprintf("%s #%d (%s)", t.Name, j.attempt, s.in.Agent.Kind))
		},
		func(i int, f workflow.Future) {
			j := jobs[i]
			t := s.in.Tasks[j.task]
			s.progress.Done++
			r := rolloutOutcome(ctx, f, RolloutInput{CampaignID: s.in.SweepID, Stage: "eval", Task: t, Attempt: j.attempt})
			if r.Resolved {
				s.progress.Resolved++
			}
			s.results = append(s.results, r)
		})
	if err != nil {
		return EvalSweepResult{}, err
	}
	sort.Slice(s.results, func(i, j int) bool {
		a, b := s.results[i], s.results[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Attempt < b.Attempt
	})
	report := EvalReport{
		SweepID: s.in.SweepID, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID,
		Agent: s.in.Agent, Attempts: s.in.Attempts, S: s.in.S,
		Summary: Summarize(s.results), Rollouts: s.results,
	}
	out := EvalSweepResult{SweepID: s.in.SweepID, Summary: report.Summary}
	err = storeJSON(ctx, "store eval report", "evals/"+ids.Clean(s.in.SweepID)+"/report.json", report).Get(ctx, &out.Report)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("resolved %d/%d scored (%.1f%%), mean reward %.3f",
		out.Summary.Resolved, out.Summary.Scored, 100*out.Summary.ResolvedRate, out.Summary.MeanReward))
	return out, err
}

// storeJSON writes a workflow's artifact (a record or report) to the store.
func storeJSON(ctx workflow.Context, summary, key string, value any) workflow.Future {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           ids.ControlQueue,
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10},
		Summary:             summary,
	})
	return workflow.ExecuteActivity(actx, act.StoreJSON, activities.StoreJSONInput{Key: key, Value: value})
}

// startRollout starts a child RolloutWorkflow with its deterministic ID and
// search attributes; cancelling the parent cancels it (so it cleans up).
func startRollout(ctx workflow.Context, rin RolloutInput, summary string) workflow.ChildWorkflowFuture {
	rid := ids.RolloutID(rin.CampaignID, rin.Stage, rin.Step, rin.Task.ID, rin.Attempt)
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:        ids.RolloutWorkflowID(rid),
		TaskQueue:         ids.ControlQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:     summary,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			ids.CampaignID.ValueSet(rin.CampaignID), ids.Stage.ValueSet(rin.Stage),
			ids.TaskID.ValueSet(rin.Task.ID), ids.RolloutIDK.ValueSet(rid),
			ids.Step.ValueSet(int64(rin.Step)), ids.Attempt.ValueSet(int64(rin.Attempt))),
	})
	return workflow.ExecuteChildWorkflow(cctx, RolloutWorkflow, rin)
}

// rolloutOutcome reads a finished child; a rollout that failed as a workflow
// is still counted, as infra_error or task_invalid.
func rolloutOutcome(ctx workflow.Context, f workflow.Future, rin RolloutInput) RolloutResult {
	var r RolloutResult
	if err := f.Get(ctx, &r); err != nil {
		rid := ids.RolloutID(rin.CampaignID, rin.Stage, rin.Step, rin.Task.ID, rin.Attempt)
		r = RolloutResult{
			RolloutID: rid, WorkflowID: ids.RolloutWorkflowID(rid), TaskID: rin.Task.ID, Name: rin.Task.Name,
			Category: rin.Task.Category, Difficulty: rin.Task.Difficulty, Attempt: rin.Attempt,
			Outcome: OutcomeInfraError, Error: oneLine(err),
		}
		if k := errorType(err); k == errs.BadInput || k == errs.TaskInvalid {
			r.Outcome = OutcomeTaskInvalid
		}
	}
	return r
}

// Summarize aggregates rollouts. Rates and means are over scored rollouts.
func Summarize(rs []RolloutResult) Summary {
	s := Summary{
		Outcomes: map[string]int{}, AgentEnds: map[string]int{},
		ByCategory: map[string]Group{}, ByDifficulty: map[string]Group{},
	}
	var reward, turns, dur float64
	add := func(m map[string]Group, key string, r RolloutResult) {
		if key == "" {
			key = "(none)"
		}
		g := m[key]
		g.Rollouts++
		if r.Scored {
			g.Scored++
			g.MeanReward += r.Reward
			if r.Resolved {
				g.Resolved++
			}
		}
		m[key] = g
	}
	for _, r := range rs {
		s.Rollouts++
		s.Outcomes[r.Outcome]++
		if r.AgentEnd != "" {
			s.AgentEnds[r.AgentEnd]++
		}
		s.SandboxRetries += max(r.SandboxAttempts-1, 0)
		turns += float64(r.Turns)
		dur += r.DurationSec
		if r.Scored {
			s.Scored++
			reward += r.Reward
			if r.Resolved {
				s.Resolved++
			}
		}
		add(s.ByCategory, r.Category, r)
		add(s.ByDifficulty, r.Difficulty, r)
		if len(r.PolicyVersions) > 0 {
			if s.PolicyVersions == nil {
				s.PolicyVersions = map[string]int{}
			}
			s.PolicyVersions[strings.Join(r.PolicyVersions, "+")]++
		}
	}
	if s.Scored > 0 {
		s.ResolvedRate = float64(s.Resolved) / float64(s.Scored)
		s.MeanReward = reward / float64(s.Scored)
	}
	if s.Rollouts > 0 {
		s.MeanTurns = turns / float64(s.Rollouts)
		s.MeanDurationS = dur / float64(s.Rollouts)
	}
	for _, m := range []map[string]Group{s.ByCategory, s.ByDifficulty} {
		for _, k := range sortedKeys(m) {
			g := m[k]
			if g.Scored > 0 {
				g.MeanReward /= float64(g.Scored)
				g.ResolvedRate = float64(g.Resolved) / float64(g.Scored)
			}
			m[k] = g
		}
	}
	return s
}

// ReaperWorkflow removes one host's leftover sandboxes; a Temporal Schedule
// per sandbox host starts it.
func ReaperWorkflow(ctx workflow.Context, in ReaperInput) (activities.ReapResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              ids.SandboxHostQueue(in.Host),
		ScheduleToStartTimeout: time.Minute,
		StartToCloseTimeout:    5 * time.Minute,
		HeartbeatTimeout:       time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 2},
		Summary:                "reap " + in.Host,
	})
	var res activities.ReapResult
	err := workflow.ExecuteActivity(ctx, act.Reap, activities.ReapInput{TTLSec: in.TTLSec}).Get(ctx, &res)
	return res, err
}
