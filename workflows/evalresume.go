package workflows

import (
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// Resuming a sweep (Harbor's `jobs resume`): round n of a sweep reruns the
// rollouts of its latest report (round n-1's, or the sweep's own) that are
// unfinished or whose error type is in the filter, keeps the others, and
// stores a report over all of them at EvalResumeReportKey(sweep, n). A rerun
// is rollout step n, so its workflow and rollout IDs differ from the run it
// replaces and both records stay in the store.

// Error types of a rollout, as its Harbor result.json names them
// (exception_info.exception_type) and `starter eval --resume -f` filters them.
const (
	ErrorInfra          = "InfraError"                 // infra_error
	ErrorVerifier       = "VerifierError"              // verifier_error (scored 0)
	ErrorTaskInvalid    = "TaskInvalid"                // task_invalid
	ErrorRoutingMissing = "RoutingMissing"             // aborted
	ErrorAgentTimeout   = "AgentTimeoutError"          // scored; the agent ran out of time
	ErrorContextLength  = "ContextLengthExceededError" // scored; the model's context was full
)

// ErrorTypes are the error types a resume may filter on.
var ErrorTypes = []string{ErrorInfra, ErrorVerifier, ErrorTaskInvalid, ErrorRoutingMissing, ErrorAgentTimeout, ErrorContextLength}

// DefaultResumeErrorTypes are rerun when a resume names none: the errors a
// rerun can cure. A task_invalid task fails the same way again, and a scored
// rollout keeps its score unless asked for: a verifier_error too (scored 0
// since GetVersion verifier-error-scored; Harbor's resume keeps its
// VerifierTimeoutError trials), or a rerun would let a rollout that hung its
// verifier try again. A verifier_error recorded before that version is
// unscored, no score to keep: a default resume reruns it too
// (ResumePlanInput.UnscoredVerifierErrors).
var DefaultResumeErrorTypes = []string{ErrorInfra, ErrorRoutingMissing}

// DefaultResumeNote says what a default resume reruns besides
// DefaultResumeErrorTypes (ResumePlanInput.UnscoredVerifierErrors).
const DefaultResumeNote = "unscored VerifierError (recorded before verifier failures were scored 0)"

// ErrorType is r's error type, "" for a rollout that ended without one.
func (r RolloutResult) ErrorType() string {
	switch r.Outcome {
	case OutcomeInfraError:
		return ErrorInfra
	case OutcomeVerifierError:
		return ErrorVerifier
	case OutcomeTaskInvalid:
		return ErrorTaskInvalid
	case OutcomeAborted:
		return ErrorRoutingMissing
	}
	switch r.AgentEnd {
	case AgentEndTimeout:
		return ErrorAgentTimeout
	case AgentEndContextExhausted:
		return ErrorContextLength
	}
	return ""
}

// CheckErrorTypes names the first type that is not one of ErrorTypes.
func CheckErrorTypes(types []string) error {
	for _, t := range types {
		if !slices.Contains(ErrorTypes, t) {
			return fmt.Errorf("error type %q: not one of %s", t, strings.Join(ErrorTypes, ", "))
		}
	}
	return nil
}

// Activities of the resume (workflows/sweepstore), called by name.
const (
	ActivityPlanEvalResume    = "PlanEvalResume"
	ActivityBuildResumeReport = "BuildResumeReport"
)

// MaxResumeReruns bounds the rollouts one resume reruns: their tasks travel
// in the resume's history (about 300 bytes each).
const MaxResumeReruns = 2000

// EvalResumeInput is round Round of resuming sweep SweepID. The sweep's
// settings are the ones it ran with (Sweep: its latest run's input).
type EvalResumeInput struct {
	SweepID string         `json:"sweep_id"`
	Round   int            `json:"round"`
	Sweep   EvalSweepInput `json:"sweep"`
	// ErrorTypes to rerun; empty: DefaultResumeErrorTypes and the unscored
	// verifier_errors.
	ErrorTypes  []string `json:"error_types,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
}

// ResumePlanInput asks which rollouts round Round reruns.
type ResumePlanInput struct {
	SweepID    string    `json:"sweep_id"`
	Round      int       `json:"round"`
	Manifest   store.Ref `json:"manifest"`
	Attempts   int       `json:"attempts"`
	ErrorTypes []string  `json:"error_types"`
	// UnscoredVerifierErrors (a resume that names no error types) reruns
	// too a verifier_error recorded unscored, before GetVersion
	// verifier-error-scored: not a score, so kept it would stay unscored,
	// and -f VerifierError would rerun the scored 0s as well.
	UnscoredVerifierErrors bool `json:"unscored_verifier_errors,omitempty"`
}

// ResumeJob is one rollout to rerun.
type ResumeJob struct {
	Task    task.Ref `json:"task"`
	Attempt int      `json:"attempt"`
	// Replaces: the error type of the result it replaces, "" for an
	// unfinished rollout (no result).
	Replaces string `json:"replaces,omitempty"`
}

// ResumePlan is what a round keeps (a stored []RolloutResult) and reruns.
type ResumePlan struct {
	Kept      store.Ref   `json:"kept"`
	KeptCount int         `json:"kept_count"`
	Jobs      []ResumeJob `json:"jobs"`
}

// ResumeReportInput merges the kept results with the reruns' (both stored).
type ResumeReportInput struct {
	EvalReportInput
	Round  int       `json:"round"`
	Kept   store.Ref `json:"kept"`
	Reruns store.Ref `json:"reruns"`
}

// EvalResumeReportKey is where round n of a sweep's resume stores its report.
func EvalResumeReportKey(sweepID string, round int) string {
	return fmt.Sprintf("evals/%s/resume/%03d/report.json", ids.Clean(sweepID), round)
}

// EvalResumeKeptKey is where round n stores the results it keeps.
func EvalResumeKeptKey(sweepID string, round int) string {
	return fmt.Sprintf("evals/%s/resume/%03d/kept.json", ids.Clean(sweepID), round)
}

func evalResumeRerunsKey(sweepID string, round int) string {
	return fmt.Sprintf("evals/%s/resume/%03d/reruns.json", ids.Clean(sweepID), round)
}

func (in EvalResumeInput) validate() error {
	switch {
	case in.SweepID == "":
		return fmt.Errorf("eval resume: sweep_id is empty")
	case in.Round < 1:
		return fmt.Errorf("eval resume: round %d must be at least 1", in.Round)
	case in.Sweep.TaskManifest == nil || in.Sweep.TaskManifest.URI == "":
		return fmt.Errorf("eval resume: sweep.task_manifest is empty (the sweep's task list)")
	case in.Sweep.Attempts < 1:
		return fmt.Errorf("eval resume: sweep.attempts %d must be at least 1", in.Sweep.Attempts)
	}
	if err := CheckErrorTypes(in.ErrorTypes); err != nil {
		return fmt.Errorf("eval resume: %w", err)
	}
	return in.Sweep.Agent.Validate()
}

// EvalResumeWorkflow plans round in.Round, reruns its jobs as child
// rollouts in a window of in.Concurrency, and stores the merged report.
func EvalResumeWorkflow(ctx workflow.Context, in EvalResumeInput) (EvalSweepResult, error) {
	if err := in.validate(); err != nil {
		return EvalSweepResult{}, temporal.NewNonRetryableApplicationError(err.Error(), errs.BadInput, nil)
	}
	types := in.ErrorTypes
	if len(types) == 0 {
		types = DefaultResumeErrorTypes
	}
	var plan ResumePlan
	err := workflow.ExecuteActivity(sweepActivityCtx(ctx, fmt.Sprintf("plan resume %d", in.Round)), ActivityPlanEvalResume, ResumePlanInput{
		SweepID: in.SweepID, Round: in.Round, Manifest: *in.Sweep.TaskManifest, Attempts: in.Sweep.Attempts, ErrorTypes: types,
		UnscoredVerifierErrors: len(in.ErrorTypes) == 0,
	}).Get(ctx, &plan)
	if err != nil {
		return EvalSweepResult{}, err
	}
	progress := Progress{Total: len(plan.Jobs)}
	c := in.Concurrency
	if c <= 0 {
		c = in.Sweep.Concurrency
	}
	if c <= 0 {
		c = DefaultEvalConcurrency
	}
	width, err := newConcurrency(ctx, c, func() Progress { return progress })
	if err != nil {
		return EvalSweepResult{}, err
	}
	defer width.final(ctx)
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return progress, nil }); err != nil {
		return EvalSweepResult{}, err
	}
	results := make([]RolloutResult, len(plan.Jobs))
	sw := in.Sweep
	rin := func(j ResumeJob) RolloutInput {
		return RolloutInput{CampaignID: in.SweepID, Stage: "eval", Step: in.Round, Task: j.Task, Attempt: j.Attempt,
			Agent: sw.Agent, TurnCap: sw.TurnCap, S: sw.S, AgentTimeoutSec: sw.AgentTimeoutSec}
	}
	err = slidingWindow(ctx, len(plan.Jobs), width, &progress.Running,
		func(i int) workflow.Future {
			j := plan.Jobs[i]
			return startRollout(ctx, rin(j), fmt.Sprintf("%s #%d (%s, rerun %d)", j.Task.Name, j.Attempt, sw.Agent.Kind, in.Round))
		},
		func(i int, f workflow.Future) {
			r := rolloutOutcome(ctx, f, rin(plan.Jobs[i]))
			progress.Done++
			if r.Resolved {
				progress.Resolved++
			}
			results[i] = r
		})
	if err != nil {
		return EvalSweepResult{}, err
	}
	var reruns store.Ref
	if err := storeJSON(ctx, "store reruns", evalResumeRerunsKey(in.SweepID, in.Round), results).Get(ctx, &reruns); err != nil {
		return EvalSweepResult{}, err
	}
	var out EvalSweepResult
	err = workflow.ExecuteActivity(sweepActivityCtx(ctx, "build resumed report"), ActivityBuildResumeReport, ResumeReportInput{
		EvalReportInput: EvalReportInput{SweepID: in.SweepID, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID,
			Agent: sw.Agent, Attempts: sw.Attempts, S: sw.S, Expected: plan.KeptCount + len(plan.Jobs)},
		Round: in.Round, Kept: plan.Kept, Reruns: reruns,
	}).Get(ctx, &out)
	if err != nil {
		return out, err
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("reran %d, kept %d: resolved %d/%d (%.1f%%; %d unscored counted as 0)",
		len(plan.Jobs), plan.KeptCount, out.Summary.Resolved, out.Summary.Rollouts, 100*out.Summary.ResolvedRate, out.Summary.Unscored))
	return out, nil
}
