package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// The audit sweep of any size (GetVersion audit-sweep-windowed): its tasks
// are a manifest in the store read a page at a time, each page's tasks are
// audited (at most Concurrency at once) and their verdicts stored as one
// chunk before the next page starts, the kept ones go to the keep pool page
// by page, and after ContinueEvery tasks the run continues as new with its
// window. The similarity pass (near duplicates, contamination) runs once,
// over the whole manifest, and stores its answer; the report is built from
// the chunks by an activity. Nothing in the workflow grows with the sweep.

// Activities of workflows/sweepstore for the audit sweep, called by name
// (they need this package's types).
const (
	ActivityAuditTaskPage    = "AuditTaskPage"
	ActivityBuildAuditReport = "BuildAuditReport"
	ActivityAuditResult      = "AuditResult" // a ChildOutcome[audit.Verdict]
)

// AuditPageSize is how many tasks an audit sweep reads, audits and stores as
// one verdict chunk at a time.
var AuditPageSize = 100

// AuditWindow is an audit sweep's progress, carried across continue-as-new.
type AuditWindow struct {
	Tasks       int       `json:"tasks"`      // in the manifest
	Similarity  store.Ref `json:"similarity"` // PoolSimilarityStored's answer
	Next        int       `json:"next"`       // the first task, in manifest order, not audited yet
	Kept        int       `json:"kept"`
	Chunks      int       `json:"chunks"` // verdict chunks stored (AuditChunkKey)
	AddedToPool int       `json:"added_to_pool"`
	Runs        int       `json:"runs"` // runs before this one
}

// AuditPageInput asks for tasks [Offset, Offset+Limit) of a manifest.
type AuditPageInput struct {
	Manifest   store.Ref `json:"manifest"`
	Similarity store.Ref `json:"similarity"`
	Offset     int       `json:"offset"`
	Limit      int       `json:"limit"`
}

// AuditPage is a page of a manifest's tasks and the similarity of those
// that have a near duplicate or contamination.
type AuditPage struct {
	Offset     int                         `json:"offset"`
	Tasks      []task.Ref                  `json:"tasks"`
	Similarity map[string]audit.Similarity `json:"similarity,omitempty"`
	Total      int                         `json:"total"`
}

// AuditReportInput builds a windowed audit sweep's report from its chunks.
type AuditReportInput struct {
	RunID       string       `json:"run_id"`
	KeepPool    string       `json:"keep_pool"`
	Config      audit.Config `json:"config"`
	Chunks      int          `json:"chunks"`
	Expected    int          `json:"expected"` // verdicts: one per task
	AddedToPool int          `json:"added_to_pool"`
}

// AuditChunkKey is where verdict chunk n of an audit sweep is stored.
func AuditChunkKey(run string, n int) string {
	return fmt.Sprintf("audits/%s/verdicts/%06d.json", ids.Clean(run), n)
}

// validate names the field at fault.
func (in AuditSweepInput) validate() error {
	switch {
	case len(in.Tasks) == 0 && in.TaskManifest == nil && in.Window == nil:
		return fmt.Errorf("audit: no tasks")
	case len(in.Tasks) > 0 && in.TaskManifest != nil:
		return fmt.Errorf("audit: tasks (%d) and task_manifest %s: give one, not both", len(in.Tasks), in.TaskManifest.URI)
	case in.TaskManifest != nil && in.TaskManifest.URI == "":
		return fmt.Errorf("audit: task_manifest.uri is empty")
	case in.ContinueEvery < 0:
		return fmt.Errorf("audit: continue_every %d: must be at least 1 (0: %d)", in.ContinueEvery, DefaultContinueEvery)
	}
	return nil
}

func auditSweepWindowed(ctx workflow.Context, in AuditSweepInput) (AuditSweepResult, error) {
	in.defaults()
	if err := in.validate(); err != nil {
		return AuditSweepResult{}, temporal.NewNonRetryableApplicationError(err.Error(), errs.BadInput, nil)
	}
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(in.RunID), ids.Stage.ValueSet("audit"))
	var prog Progress
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return prog, nil }); err != nil {
		return AuditSweepResult{}, err
	}
	actx := auditSweepCtx(ctx)
	if in.Window == nil {
		if err := openAuditWindow(ctx, actx, &in); err != nil {
			return AuditSweepResult{}, err
		}
	}
	w := in.Window
	prog = Progress{Total: w.Tasks, Done: w.Next, Resolved: w.Kept}
	every := in.ContinueEvery
	if every == 0 {
		every = DefaultContinueEvery
	}
	for stop := min(w.Tasks, w.Next+every); w.Next < stop; {
		if err := auditPage(ctx, actx, &in, min(AuditPageSize, stop-w.Next), &prog); err != nil {
			return AuditSweepResult{}, err
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("audited %d of %d; kept %d (run %d)", w.Next, w.Tasks, w.Kept, w.Runs+1))
	}
	if w.Next < w.Tasks {
		w.Runs++
		return AuditSweepResult{}, workflow.NewContinueAsNewError(ctx, AuditSweepWorkflow, in)
	}
	var out AuditSweepResult
	err := workflow.ExecuteActivity(actx, ActivityBuildAuditReport, AuditReportInput{RunID: in.RunID, KeepPool: in.KeepPool, Config: in.Config,
		Chunks: w.Chunks, Expected: w.Tasks, AddedToPool: w.AddedToPool}).Get(ctx, &out)
	if err != nil {
		return out, err
	}
	s := out.Summary
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("kept %d of %d; hard rejects %v (%d runs)", s.Kept, s.Audited, s.HardRejects, w.Runs+1))
	return out, nil
}

// openAuditWindow starts the first run: inline tasks go to a manifest, and
// the similarity pass reads it whole and stores its answer.
func openAuditWindow(ctx, actx workflow.Context, in *AuditSweepInput) error {
	if len(in.Tasks) > 0 {
		var ref store.Ref
		err := storeJSON(ctx, "store task manifest", "audits/"+ids.Clean(in.RunID)+"/tasks.json", task.Pool{Name: in.RunID, Tasks: in.Tasks}).Get(ctx, &ref)
		if err != nil {
			return err
		}
		in.TaskManifest, in.Tasks = &ref, nil
	}
	var sim activities.StoredSimilarity
	err := workflow.ExecuteActivity(actx, act.PoolSimilarityStored, activities.StoredSimilarityInput{Manifest: *in.TaskManifest, Eval: in.Eval,
		Config: in.Config, Key: "audits/" + ids.Clean(in.RunID) + "/similarity.json"}).Get(ctx, &sim)
	if err != nil {
		return err
	}
	in.Window = &AuditWindow{Tasks: sim.Tasks, Similarity: sim.Ref}
	return nil
}

// auditPage audits the next limit tasks, stores their verdicts as the next
// chunk and adds the kept ones to the keep pool, then moves the window on.
func auditPage(ctx, actx workflow.Context, in *AuditSweepInput, limit int, prog *Progress) error {
	w := in.Window
	var page AuditPage
	err := workflow.ExecuteActivity(actx, ActivityAuditTaskPage, AuditPageInput{Manifest: *in.TaskManifest, Similarity: w.Similarity,
		Offset: w.Next, Limit: limit}).Get(ctx, &page)
	if err == nil && (page.Offset != w.Next || len(page.Tasks) == 0) {
		err = temporal.NewNonRetryableApplicationError(fmt.Sprintf("audit: task_manifest %s has no task %d (of %d)",
			in.TaskManifest.URI, w.Next, page.Total), errs.BadInput, nil)
	}
	if err != nil {
		return err
	}
	// Audits started again keep their verdicts (v1): see auditTasks.
	reuse := workflow.GetVersion(ctx, "audit-sweep-reuse", workflow.DefaultVersion, 1) == 1
	verdicts, err := auditTasks(ctx, *in, page.Tasks, page.Similarity, reuse, prog)
	if err != nil {
		return err
	}
	if err := storeJSON(ctx, fmt.Sprintf("verdicts of tasks %d+", w.Next), AuditChunkKey(in.RunID, w.Chunks), verdicts).Get(ctx, nil); err != nil {
		return err
	}
	keep := keptTasks(page.Tasks, verdicts)
	if in.KeepPool != "" && len(keep) > 0 {
		var added int
		if err := workflow.ExecuteActivity(actx, act.ImportToPool, activities.ImportInput{Pool: in.KeepPool, Tasks: keep}).Get(ctx, &added); err != nil {
			return err
		}
		w.AddedToPool += added
	}
	w.Chunks++
	w.Next += len(page.Tasks)
	w.Kept += len(keep)
	return nil
}
