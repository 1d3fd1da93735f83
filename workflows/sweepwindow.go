package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// An eval sweep of any size: its rollouts run in a window that continues as
// new every ContinueEvery starts (or when Temporal suggests it) with
// rollouts in flight. Rollouts are started with ParentClosePolicy ABANDON
// and report their results by signal to the sweep's workflow ID, which
// reaches its latest run; the window (next job, rollouts in flight,
// counters) is carried in the input. The task list is a manifest in the
// store read a page at a time, results go to the store in chunks (one per
// run, or more), and the report is built from the chunks by an activity.

// Activities of the sweep package (workflows/sweepstore), called by name:
// they need this package's types, and this package cannot import them.
const (
	ActivitySweepTaskPage      = "SweepTaskPage"
	ActivityBuildEvalReport    = "BuildEvalReport"
	ActivityBuildRolloutRecord = "BuildRolloutRecord"
	ActivityClosedRollouts     = "ClosedRollouts"
)

// OrphanCheckEvery is how long a sweep waits on rollouts an earlier run
// started before it asks Temporal whether any of them closed without
// reporting (an operator terminated it, or it timed out): those are counted
// as infra errors instead of being waited for forever.
var OrphanCheckEvery = 10 * time.Minute

// FlushEvery: results received are written as a chunk once this many are
// pending, not only at continue-as-new (a run of continue_every starts at
// concurrency 1024 would otherwise hold ~1,500 results, near the 2 MiB
// payload limit, in one activity input).
var FlushEvery = 500

// ClosedRollout is a rollout workflow that is no longer running, with the
// input it was started with (its first history event).
type ClosedRollout struct {
	WorkflowID string       `json:"workflow_id"`
	Status     string       `json:"status"`
	Input      RolloutInput `json:"input"`
}

// RolloutRecordInput is a record without its turns: BuildRolloutRecord
// reads turns 0..Turns-1 of the sandbox from the store
// (activities.TurnKey) and stores the whole record at Key, so readers of
// the record see what they always saw.
type RolloutRecordInput struct {
	Key       string        `json:"key"`
	Record    RolloutRecord `json:"record"`
	RolloutID string        `json:"rollout_id"`
	Sandbox   string        `json:"sandbox"`
	Turns     int           `json:"turns"`
}

// sweepTaskPageSize is how many tasks one SweepTaskPage call returns (about
// 300 bytes each in history).
const sweepTaskPageSize = 200

// TaskPageInput asks for tasks [Offset, Offset+Limit) of a manifest.
type TaskPageInput struct {
	Manifest store.Ref `json:"manifest"`
	Offset   int       `json:"offset"`
	Limit    int       `json:"limit"`
}

// TaskPage is a page of a manifest and the manifest's size.
type TaskPage struct {
	Offset int        `json:"offset"`
	Tasks  []task.Ref `json:"tasks"`
	Total  int        `json:"total"`
}

// EvalReportInput names a sweep's result chunks; BuildEvalReport checks
// that they hold Expected results, each rollout once.
type EvalReportInput struct {
	SweepID    string               `json:"sweep_id"`
	WorkflowID string               `json:"workflow_id"`
	Agent      activities.AgentSpec `json:"agent"`
	Attempts   int                  `json:"attempts"`
	S          int                  `json:"s"`
	Chunks     int                  `json:"chunks"`
	Expected   int                  `json:"expected"`
}

// ResultChunkKey is where chunk n of a sweep's results is stored (a JSON
// array of RolloutResult).
func ResultChunkKey(sweepID string, n int) string {
	return fmt.Sprintf("evals/%s/results/%06d.json", ids.Clean(sweepID), n)
}

// EvalReportKey is where a sweep's report is stored.
func EvalReportKey(sweepID string) string { return "evals/" + ids.Clean(sweepID) + "/report.json" }

// sweepWindow is the state of a windowed sweep's run.
type sweepWindow struct {
	w       *SweepWindow
	page    TaskPage
	pending []RolloutResult // results not yet in a chunk
	rw      *rolloutWindow
}

func (s *evalSweep) runWindowed(ctx workflow.Context) (EvalSweepResult, error) {
	if err := s.checkWidth(); err != nil {
		return EvalSweepResult{}, err
	}
	if err := s.openWindow(ctx); err != nil {
		return EvalSweepResult{}, err
	}
	s.rw.receive(ctx)
	every := s.in.ContinueEvery
	if every == 0 {
		every = DefaultContinueEvery
	}
	for s.w.Next < s.progress.Total {
		if err := s.await(ctx, func() bool { return len(s.w.InFlight) < s.width.limit() }); err != nil {
			return EvalSweepResult{}, s.cancelled(ctx, err)
		}
		// Await returns nil on a condition already true, cancelled or not:
		// without this a cancel could start rollouts or continue as new.
		if ctx.Err() != nil && workflow.GetVersion(ctx, "eval-sweep-cancel-checked", workflow.DefaultVersion, 1) == 1 {
			return EvalSweepResult{}, s.cancelled(ctx, ctx.Err())
		}
		if len(s.rw.started) >= every || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			err := s.continueAsNew(ctx)
			if !workflow.IsContinueAsNewError(err) {
				err = s.failed(ctx, err)
			}
			return EvalSweepResult{}, err
		}
		if len(s.pending) >= FlushEvery && workflow.GetVersion(ctx, "eval-sweep-flush-every", workflow.DefaultVersion, 1) == 1 {
			if err := s.flush(ctx); err != nil { // a chunk stays well under the payload limit
				return EvalSweepResult{}, s.failed(ctx, err)
			}
		}
		if err := s.startNext(ctx); err != nil {
			return EvalSweepResult{}, s.failed(ctx, err)
		}
	}
	if err := s.await(ctx, func() bool { return len(s.w.InFlight) == 0 }); err != nil {
		return EvalSweepResult{}, s.cancelled(ctx, err)
	}
	if err := s.flush(ctx); err != nil {
		return EvalSweepResult{}, err
	}
	var out EvalSweepResult
	err := workflow.ExecuteActivity(sweepActivityCtx(ctx, "build eval report"), ActivityBuildEvalReport, EvalReportInput{
		SweepID: s.in.SweepID, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Agent: s.in.Agent,
		Attempts: s.in.Attempts, S: s.in.S, Chunks: s.w.Chunks, Expected: s.progress.Total,
	}).Get(ctx, &out)
	if err != nil {
		return out, err
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("resolved %d/%d (%.1f%%; %d unscored counted as 0), mean reward %.3f; %d runs",
		out.Summary.Resolved, out.Summary.Rollouts, 100*out.Summary.ResolvedRate, out.Summary.Unscored, out.Summary.MeanReward, s.w.Runs+1))
	return out, nil
}

func sweepActivityCtx(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           ids.ControlQueue,
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5,
			NonRetryableErrorTypes: []string{errs.BadInput}},
		Summary: summary,
	})
}

// openWindow takes the window the last run handed over, or, in the first
// run, moves inline tasks to a manifest and reads its first page (a
// missing, empty or malformed manifest fails the sweep here).
func (s *evalSweep) openWindow(ctx workflow.Context) error {
	if s.in.Window == nil {
		if len(s.in.Tasks) > 0 {
			var ref store.Ref
			err := storeJSON(ctx, "store task manifest", "evals/"+ids.Clean(s.in.SweepID)+"/tasks.json",
				task.Pool{Name: s.in.SweepID, Tasks: s.in.Tasks}).Get(ctx, &ref)
			if err != nil {
				return err
			}
			s.in.TaskManifest, s.in.Tasks = &ref, nil
		}
		if err := s.loadPage(ctx, 0); err != nil {
			return err
		}
		s.in.Window = &SweepWindow{Tasks: s.page.Total}
		s.progress.Total = s.page.Total * s.in.Attempts
	}
	s.w = s.in.Window
	if s.w.InFlight == nil {
		s.w.InFlight = map[string]int{}
	}
	s.pending, s.w.Pending = s.w.Pending, nil
	s.rw = newRolloutWindow(s.w.InFlight, s.result)
	return nil
}

func (s *evalSweep) loadPage(ctx workflow.Context, offset int) error {
	err := workflow.ExecuteActivity(sweepActivityCtx(ctx, fmt.Sprintf("tasks %d+", offset)), ActivitySweepTaskPage,
		TaskPageInput{Manifest: *s.in.TaskManifest, Offset: offset, Limit: sweepTaskPageSize}).Get(ctx, &s.page)
	if err == nil && (s.page.Offset != offset || len(s.page.Tasks) == 0) {
		err = temporal.NewNonRetryableApplicationError(fmt.Sprintf("eval sweep: task_manifest %s has no task %d (of %d)",
			s.in.TaskManifest.URI, offset, s.page.Total), errs.BadInput, nil)
	}
	return err
}

// startNext starts job w.Next: task Next mod tasks, attempt Next div tasks + 1.
func (s *evalSweep) startNext(ctx workflow.Context) error {
	i := s.w.Next
	ti, attempt := i%s.w.Tasks, i/s.w.Tasks+1
	if ti < s.page.Offset || ti >= s.page.Offset+len(s.page.Tasks) {
		if err := s.loadPage(ctx, ti); err != nil {
			return err
		}
	}
	t := s.page.Tasks[ti-s.page.Offset]
	rin := RolloutInput{
		CampaignID: s.in.SweepID, Stage: "eval", Step: 0, Task: t, Attempt: attempt,
		Agent: s.in.Agent, TurnCap: s.in.TurnCap, S: s.in.S, AgentTimeoutSec: s.in.AgentTimeoutSec,
		ReportToParent: true,
	}
	s.rw.start(ctx, rin, fmt.Sprintf("%s #%d (%s)", t.Name, attempt, s.in.Agent.Kind), i)
	s.w.Next++
	return nil
}

// await waits for cond, checking on rollouts of earlier runs that closed
// without reporting (GetVersion eval-sweep-orphan-check; rolloutWindow.await).
func (s *evalSweep) await(ctx workflow.Context, cond func() bool) error {
	if workflow.GetVersion(ctx, "eval-sweep-orphan-check", workflow.DefaultVersion, 1) != 1 {
		return workflow.Await(ctx, cond)
	}
	return s.rw.await(ctx, cond)
}

// result counts a rollout's result (rolloutWindow.received passes each on once).
func (s *evalSweep) result(_ workflow.Context, r RolloutResult, _ int) {
	s.w.Done++
	if r.Resolved {
		s.w.Resolved++
	}
	s.pending = append(s.pending, r)
}

// flush writes the results received so far as the next chunk.
func (s *evalSweep) flush(ctx workflow.Context) error {
	if len(s.pending) == 0 {
		return nil
	}
	chunk := s.pending
	s.pending = nil
	n := s.w.Chunks
	if err := storeJSON(ctx, fmt.Sprintf("store results chunk %d (%d)", n, len(chunk)), ResultChunkKey(s.in.SweepID, n), chunk).Get(ctx, nil); err != nil {
		return err
	}
	s.w.Chunks++
	return nil
}

// continueAsNew hands the window to a new run once every rollout this run
// started has started (or it might never start) and its results are in a
// chunk; results that come in meanwhile travel in the window.
func (s *evalSweep) continueAsNew(ctx workflow.Context) error {
	s.rw.settleStarts(ctx)
	if err := s.flush(ctx); err != nil {
		return err
	}
	if err := s.rw.drain(ctx); err != nil {
		return s.cancelled(ctx, err)
	}
	s.w.Pending = s.pending
	s.w.Runs++
	s.in.Window = s.w
	s.in.Concurrency = s.width.final(ctx)
	return workflow.NewContinueAsNewError(ctx, EvalSweepWorkflow, s.in)
}

// failed: the sweep fails with rollouts in flight (a page or a chunk of
// results could not be read or stored). They were started ABANDON, so
// nothing else would stop them: every one, this run's too, is asked to
// cancel before the sweep closes, and a rerun of the sweep finds no orphan
// holding its rollout IDs.
func (s *evalSweep) failed(ctx workflow.Context, err error) error {
	if err == nil || workflow.GetVersion(ctx, "eval-sweep-cancel-on-failure", workflow.DefaultVersion, 1) != 1 {
		return err
	}
	if ctx.Err() != nil { // the sweep was cancelled while a page or chunk was in flight
		return s.cancelled(ctx, err)
	}
	if s.cancelsOwn(ctx) {
		s.rw.cancelAll(ctx)
		return err
	}
	s.rw.cancelInFlight(ctx, func(string) bool { return true })
	return err
}

// cancelled cancels the rollouts in flight and returns err. Before GetVersion
// eval-sweep-cancel-own-rollouts only earlier runs' were asked, this run's
// left to their context, which misses a rollout not started yet when the
// sweep closes.
func (s *evalSweep) cancelled(ctx workflow.Context, err error) error {
	if s.cancelsOwn(ctx) {
		s.rw.cancelAll(ctx)
		return err
	}
	return s.rw.cancelled(ctx, err)
}

func (s *evalSweep) cancelsOwn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, "eval-sweep-cancel-own-rollouts", workflow.DefaultVersion, 1) == 1
}
