package sweepstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/workflows"
)

// The report of a windowed synthesis sweep, built from its chunks, has the
// one-run report's shape at the one-run key; the accepted tasks are stored
// as a pool and listed inline only up to SynthInlineTasks; chunks that do
// not count what the sweep counted are refused.
func TestBuildSynthReportFromChunks(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Store: st}
	sum := workflows.NewSynthSummary(3)
	for n := 0; n < 3; n++ {
		seed := task.Ref{ID: fmt.Sprintf("seed%d", n), Name: fmt.Sprintf("s%d", n)}
		c := workflows.SynthesisResult{Seed: seed, Rejected: []workflows.Rejection{{Round: 1, Class: "nop_passed"}}}
		for r := 1; r <= n; r++ {
			c.Accepted = append(c.Accepted, workflows.RoundRecord{Round: r, Categories: []string{"file"},
				Task: task.Ref{ID: fmt.Sprintf("t%d%d", n, r), Name: fmt.Sprintf("z-%d-%d", n, r), Bundle: store.Ref{URI: "file:///b"}}})
		}
		sum.Add(c)
		if _, err := store.PutJSON(ctx, st, workflows.SynthChunkKey("run", n), []workflows.SynthesisResult{c}); err != nil {
			t.Fatal(err)
		}
	}
	sum.AddedToPool = 3
	in := workflows.SynthReportInput{RunID: "run", Pool: "p", PerSeed: 1, Chunks: 3, Summary: sum}
	out, err := a.BuildSynthReport(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if out.Summary.Synthesized != 3 || out.Summary.AddedToPool != 3 || len(out.Tasks) != 3 || out.Tasks[0].Name != "z-1-1" || out.TaskManifest == nil {
		t.Fatalf("result %+v", out)
	}
	var rep map[string]any
	if err := store.GetJSON(ctx, st, out.Report, &rep); err != nil || !strings.HasSuffix(out.Report.URI, workflows.SynthReportKey("run")) {
		t.Fatalf("report at %s: %v", out.Report.URI, err)
	}
	if chains, ok := rep["chains"].([]any); len(rep) != 4 || rep["run_id"] != "run" || rep["pool"] != "p" || rep["summary"] == nil || !ok || len(chains) != 3 {
		t.Errorf("report %v: want run_id, pool, summary and 3 chains", rep)
	}
	if tasks, err := task.ReadManifest(ctx, st, *out.TaskManifest); err != nil || len(tasks) != 3 {
		t.Errorf("task manifest: %d tasks, %v", len(tasks), err)
	}
	defer func(n int) { workflows.SynthInlineTasks = n }(workflows.SynthInlineTasks)
	workflows.SynthInlineTasks = 2
	if out, err := a.BuildSynthReport(ctx, in); err != nil || len(out.Tasks) != 0 || out.TaskManifest == nil {
		t.Errorf("3 tasks past an inline limit of 2: %d inline, manifest %v, %v", len(out.Tasks), out.TaskManifest, err)
	}
	in.Summary.Stopped++
	if _, err := a.BuildSynthReport(ctx, in); err == nil || !strings.Contains(err.Error(), "the sweep counted") {
		t.Errorf("a summary the chunks do not make: %v", err)
	}
}
