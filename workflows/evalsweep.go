package workflows

import (
	"fmt"
	"sort"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

type evalSweep struct {
	in       EvalSweepInput
	progress Progress
	results  []RolloutResult
	width    *concurrency
	asked    [2]int // concurrency and attempts as the input gave them
	sweepWindow
}

// EvalSweepWorkflow runs tasks × attempts as child RolloutWorkflows in a
// sliding window of at most Concurrency at a time, then stores the report.
func EvalSweepWorkflow(ctx workflow.Context, in EvalSweepInput) (EvalSweepResult, error) {
	return execute(ctx, &evalSweep{in: in})
}

func (s *evalSweep) setup(ctx workflow.Context) error {
	s.asked = [2]int{s.in.Concurrency, s.in.Attempts} // checked by the windowed path (checkWidth)
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
	if err := s.in.validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), errs.BadInput, nil)
	}
	s.progress.Total = len(s.in.Tasks) * s.in.Attempts
	if s.in.Window != nil {
		s.progress.Total = s.in.Window.Tasks * s.in.Attempts
	}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return s.status(), nil }); err != nil {
		return err
	}
	var err error
	if s.width, err = newConcurrency(ctx, s.in.Concurrency, s.status); err != nil {
		return err
	}
	return workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(s.in.SweepID), ids.Stage.ValueSet("eval"))
}

// validate names the field at fault.
func (in EvalSweepInput) validate() error {
	switch {
	case len(in.Tasks) == 0 && in.TaskManifest == nil && in.Window == nil:
		return fmt.Errorf("eval sweep: tasks is empty")
	case len(in.Tasks) > 0 && in.TaskManifest != nil:
		return fmt.Errorf("eval sweep: tasks (%d) and task_manifest %s: give one, not both", len(in.Tasks), in.TaskManifest.URI)
	case in.TaskManifest != nil && in.TaskManifest.URI == "":
		return fmt.Errorf("eval sweep: task_manifest.uri is empty")
	case in.ContinueEvery < 0:
		return fmt.Errorf("eval sweep: continue_every %d: must be at least 1 (0: %d)", in.ContinueEvery, DefaultContinueEvery)
	}
	return in.Agent.Validate()
}

// checkWidth refuses a negative concurrency or attempts and a concurrency
// past MaxConcurrency. It runs on the windowed path only, after its
// GetVersion: sweeps recorded before it took a negative value for the
// default and had no upper bound, and must replay as they ran.
func (s *evalSweep) checkWidth() error {
	c, a := s.asked[0], s.asked[1]
	switch {
	case c < 0 || a < 0:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("eval sweep: concurrency %d, attempts %d: neither may be negative (0: the default)", c, a), errs.BadInput, nil)
	case c > MaxConcurrency:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("eval sweep: concurrency %d: must be between 1 and %d (0: %d)", c, MaxConcurrency, DefaultEvalConcurrency), errs.BadInput, nil)
	}
	return nil
}

func (s *evalSweep) status() Progress {
	p := s.progress
	p.Concurrency = s.width.limit()
	if s.w != nil {
		p.Done, p.Resolved, p.Running = s.w.Done, s.w.Resolved, len(s.w.InFlight)
	}
	return p
}

// run: sweeps started since GetVersion eval-sweep-continue-as-new run their
// rollouts in a window that continues as new (sweepwindow.go); older
// histories replay the one-run window below.
func (s *evalSweep) run(ctx workflow.Context) (EvalSweepResult, error) {
	if workflow.GetVersion(ctx, "eval-sweep-continue-as-new", workflow.DefaultVersion, 1) == 1 {
		return s.runWindowed(ctx)
	}
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
	err := slidingWindow(ctx, len(jobs), s.width, &s.progress.Running,
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
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("resolved %d/%d (%.1f%%; %d unscored counted as 0), mean reward %.3f",
		out.Summary.Resolved, out.Summary.Rollouts, 100*out.Summary.ResolvedRate, out.Summary.Unscored, out.Summary.MeanReward))
	return out, err
}
