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

// The synthesis sweep of any size (GetVersion synth-sweep-windowed): its
// seeds are a manifest in the store read a page at a time; its chains, one
// per (seed, chain) in seed order, run a page at a time (at most Concurrency
// at once); each page's results are stored as chunks, its accepted tasks go
// to the pool and its counts into the summary before the next page starts;
// after ContinueEvery chains the run continues as new with its window (the
// next chain, the summary so far, the chunks written). The report is built
// from the chunks by an activity. Nothing in the workflow grows with the
// sweep.

// Activities of workflows/sweepstore for the synthesis sweep, called by name
// (they need this package's types).
const (
	ActivityBuildSynthReport     = "BuildSynthReport"
	ActivitySynthesisChainResult = "SynthesisChainResult"
)

// SynthPageSize is how many chains a synthesis sweep runs as one page (at
// least its concurrency: a page waits for its last chain before the next
// starts); SynthChunkSize is how many chain results one stored chunk holds
// (a few KB each, in the store activity's input).
var (
	SynthPageSize  = 100
	SynthChunkSize = 50
)

// SynthInlineTasks is the most accepted tasks a windowed sweep's result
// lists inline (about 300 bytes each); past it, only the stored
// TaskManifest has them.
var SynthInlineTasks = 1000

// SynthWindow is a synthesis sweep's progress, carried across
// continue-as-new.
type SynthWindow struct {
	Next    int          `json:"next"`    // the first chain (seed*per_seed + chain) not run yet
	Summary SynthSummary `json:"summary"` // of chains [0, next), added_to_pool included
	Chunks  int          `json:"chunks"`  // chain chunks stored (SynthChunkKey)
	Runs    int          `json:"runs"`    // runs before this one
}

// SynthReportInput builds a windowed synthesis sweep's report from its
// chunks; Summary is what the sweep counted, which the chunks must agree with.
type SynthReportInput struct {
	RunID   string       `json:"run_id"`
	Pool    string       `json:"pool"`
	PerSeed int          `json:"per_seed"`
	Chunks  int          `json:"chunks"`
	Summary SynthSummary `json:"summary"`
}

// SynthChunkKey is where chain chunk n of a synthesis sweep is stored.
func SynthChunkKey(run string, n int) string {
	return fmt.Sprintf("synth/%s/chains/%06d.json", ids.Clean(run), n)
}

// SynthTasksKey is where a windowed sweep stores its accepted tasks (a
// task.Pool).
func SynthTasksKey(run string) string { return "synth/" + ids.Clean(run) + "/tasks.json" }

// validate names the field at fault.
func (in SynthSweepInput) validate() error {
	switch {
	case len(in.Seeds) == 0 && in.SeedManifest == nil && in.Window == nil:
		return fmt.Errorf("synth sweep: no seeds (seeds or seed_manifest)")
	case in.Pool == "":
		return fmt.Errorf("synth sweep: pool is required")
	case len(in.Seeds) > 0 && in.SeedManifest != nil:
		return fmt.Errorf("synth sweep: seeds (%d) and seed_manifest %s: give one, not both", len(in.Seeds), in.SeedManifest.URI)
	case in.SeedManifest != nil && in.SeedManifest.URI == "":
		return fmt.Errorf("synth sweep: seed_manifest.uri is empty")
	case in.ContinueEvery < 0:
		return fmt.Errorf("synth sweep: continue_every %d: must be at least 1 (0: %d)", in.ContinueEvery, DefaultContinueEvery)
	}
	return nil
}

func synthSweepWindowed(ctx workflow.Context, in SynthSweepInput) (SynthSweepResult, error) {
	in.defaults()
	if err := in.validate(); err != nil {
		return SynthSweepResult{}, temporal.NewNonRetryableApplicationError(err.Error(), errs.BadInput, nil)
	}
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(in.RunID), ids.Stage.ValueSet("synth"))
	var prog Progress
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return prog, nil }); err != nil {
		return SynthSweepResult{}, err
	}
	if in.Window == nil {
		if err := openSynthWindow(ctx, &in); err != nil {
			return SynthSweepResult{}, err
		}
	}
	w := in.Window
	total := w.Summary.Seeds * in.PerSeed
	prog = Progress{Total: total, Done: w.Next, Resolved: w.Summary.Synthesized}
	every := in.ContinueEvery
	if every == 0 {
		every = DefaultContinueEvery
	}
	for stop := min(total, w.Next+every); w.Next < stop; {
		if err := synthPage(ctx, &in, min(max(SynthPageSize, in.Concurrency), stop-w.Next), &prog); err != nil {
			return SynthSweepResult{}, err
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("%d of %d chains done; %d tasks synthesized, %d added to pool %s (run %d)",
			w.Next, total, w.Summary.Synthesized, w.Summary.AddedToPool, in.Pool, w.Runs+1))
	}
	if w.Next < total {
		w.Runs++
		return SynthSweepResult{}, workflow.NewContinueAsNewError(ctx, SynthSweepWorkflow, in)
	}
	var out SynthSweepResult
	err := workflow.ExecuteActivity(synthSweepCtx(ctx, "build the report"), ActivityBuildSynthReport,
		SynthReportInput{RunID: in.RunID, Pool: in.Pool, PerSeed: in.PerSeed, Chunks: w.Chunks, Summary: w.Summary}).Get(ctx, &out)
	if err != nil {
		return out, err
	}
	workflow.SetCurrentDetails(ctx, synthDetails(out.Summary, in.Pool)+fmt.Sprintf(" (%d runs)", w.Runs+1))
	return out, nil
}

// synthSweepCtx is how a windowed synthesis sweep calls its activities.
func synthSweepCtx(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10, NonRetryableErrorTypes: []string{errs.BadInput}},
		Summary:     summary,
	})
}

// openSynthWindow starts the first run: inline seeds go to a manifest, whose
// first page (checked whole by the activity) gives the number of seeds.
func openSynthWindow(ctx workflow.Context, in *SynthSweepInput) error {
	if len(in.Seeds) > 0 {
		var ref store.Ref
		err := storeJSON(ctx, "store seed manifest", "synth/"+ids.Clean(in.RunID)+"/seeds.json", task.Pool{Name: in.RunID, Tasks: in.Seeds}).Get(ctx, &ref)
		if err != nil {
			return err
		}
		in.SeedManifest, in.Seeds = &ref, nil
	}
	var page TaskPage
	err := workflow.ExecuteActivity(synthSweepCtx(ctx, "count the seeds"), ActivitySweepTaskPage,
		TaskPageInput{Manifest: *in.SeedManifest, Offset: 0, Limit: 1}).Get(ctx, &page)
	if err != nil {
		return err
	}
	in.Window = &SynthWindow{Summary: NewSynthSummary(page.Total)}
	return nil
}

// synthPage runs the next limit chains, stores their results as chunks, adds
// their accepted tasks to the pool and counts them, then moves the window on.
func synthPage(ctx workflow.Context, in *SynthSweepInput, limit int, prog *Progress) error {
	w := in.Window
	first, last := w.Next/in.PerSeed, (w.Next+limit-1)/in.PerSeed
	var page TaskPage
	err := workflow.ExecuteActivity(synthSweepCtx(ctx, fmt.Sprintf("seeds %d-%d", first, last)), ActivitySweepTaskPage,
		TaskPageInput{Manifest: *in.SeedManifest, Offset: first, Limit: last - first + 1}).Get(ctx, &page)
	if err == nil && (page.Offset != first || len(page.Tasks) != last-first+1) {
		err = temporal.NewNonRetryableApplicationError(fmt.Sprintf("synth sweep: seed_manifest %s has %d seeds from %d, want %d (of %d)",
			in.SeedManifest.URI, len(page.Tasks), first, last-first+1, w.Summary.Seeds), errs.BadInput, nil)
	}
	if err != nil {
		return err
	}
	chains := make([]SynthesisResult, limit)
	err = slidingWindow(ctx, limit, fixedConcurrency(in.Concurrency), &prog.Running,
		func(i int) workflow.Future {
			k := w.Next + i
			return startChain(ctx, *in, page.Tasks[k/in.PerSeed-first], k%in.PerSeed)
		},
		func(i int, f workflow.Future) {
			prog.Done++
			k := w.Next + i
			var r SynthesisResult
			if err := f.Get(ctx, &r); err != nil {
				r = failedChain(page.Tasks[k/in.PerSeed-first], k%in.PerSeed, err)
			}
			prog.Resolved += len(r.Accepted)
			chains[i] = r
		})
	if err != nil {
		return err
	}
	n := w.Chunks
	for lo := 0; lo < len(chains); lo += SynthChunkSize {
		hi := min(lo+SynthChunkSize, len(chains))
		if err := storeJSON(ctx, fmt.Sprintf("results of chains %d-%d", w.Next+lo, w.Next+hi-1), SynthChunkKey(in.RunID, n), chains[lo:hi]).Get(ctx, nil); err != nil {
			return err
		}
		n++
	}
	var added int
	if accepted := AcceptedTasks(chains); len(accepted) > 0 {
		err := workflow.ExecuteActivity(synthSweepCtx(ctx, fmt.Sprintf("add %d tasks to pool %s", len(accepted), in.Pool)), act.ImportToPool,
			activities.ImportInput{Pool: in.Pool, Tasks: accepted}).Get(ctx, &added)
		if err != nil {
			return err
		}
	}
	for _, c := range chains {
		w.Summary.Add(c)
	}
	w.Summary.AddedToPool += added
	w.Chunks = n
	w.Next += limit
	return nil
}

// startChain starts the chain's SynthesisWorkflow and settles with its
// result. The child's ID is the one-run sweep's (ids.SynthesisWorkflowID),
// and a chain that completed under it before (a sweep started again after
// it failed, or reset) is not run again: its result is read from the run
// that holds the ID, waiting for it if it is still running (startReusing).
// A chain that failed, was terminated or timed out is started again.
func startChain(ctx workflow.Context, in SynthSweepInput, seed task.Ref, chain int) workflow.Future {
	opts := workflow.ChildWorkflowOptions{
		WorkflowID: ids.SynthesisWorkflowID(in.RunID, seed.ID, chain), TaskQueue: ids.ControlQueue,
		StaticSummary: fmt.Sprintf("RST on %s, chain %d", seed.Name, chain),
	}
	return startReusing[SynthesisResult](ctx, opts, ActivitySynthesisChainResult, SynthesisWorkflow, in.chainInput(seed, chain))
}

// AssembleSynthReport is a windowed sweep's report from its chunks' chains
// (in order): each (seed, chain) exactly once, all seeds × per_seed of them,
// and the counts the sweep carried (in.Summary) the same as the chains'.
func AssembleSynthReport(in SynthReportInput, chains []SynthesisResult) (SynthReport, error) {
	seen := make(map[string]bool, len(chains))
	sum := NewSynthSummary(in.Summary.Seeds)
	for _, c := range chains {
		k := fmt.Sprintf("%s/%d", c.Seed.ID, c.Chain)
		if seen[k] {
			return SynthReport{}, fmt.Errorf("synth report %s: seed %s (%s) chain %d is there twice", in.RunID, c.Seed.ID, c.Seed.Name, c.Chain)
		}
		seen[k] = true
		sum.Add(c)
	}
	if want := in.Summary.Seeds * in.PerSeed; len(chains) != want {
		return SynthReport{}, fmt.Errorf("synth report %s: %d chains in %d chunks, expected %d seeds × %d", in.RunID, len(chains), in.Chunks, in.Summary.Seeds, in.PerSeed)
	}
	sum.AddedToPool = in.Summary.AddedToPool
	if a, b := fmt.Sprintf("%+v", sum), fmt.Sprintf("%+v", in.Summary); a != b {
		return SynthReport{}, fmt.Errorf("synth report %s: the chunks count %s, the sweep counted %s", in.RunID, a, b)
	}
	return SynthReport{RunID: in.RunID, Pool: in.Pool, Summary: sum, Chains: chains}, nil
}
