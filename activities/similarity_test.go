package activities

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// The stored similarity pass over a manifest: a renamed copy of a task is a
// near duplicate of it (the later name is the duplicate), a task an eval set
// holds is contaminated, and only those two are stored.
func TestPoolSimilarityStoredFindsDuplicatesAndContamination(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bundle := func(dir, name string) task.Ref {
		t.Helper()
		tk, err := task.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		tk.Name = name
		ref, err := task.Bundle(ctx, st, tk)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	ex := func(name string) string { return filepath.Join("..", "examples", "tasks", name) }
	copyDir := t.TempDir()
	if err := os.CopyFS(copyDir, os.DirFS(ex("log-level-counter"))); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(copyDir, "instruction.md"), append(mustRead(t, filepath.Join(copyDir, "instruction.md")), []byte("\nBe careful.\n")...), 0o644)
	tasks := []task.Ref{
		bundle(ex("log-level-counter"), "a-log-level-counter"),
		bundle(copyDir, "b-log-level-counter-copy"),
		bundle(ex("csv-revenue-report"), "c-csv-revenue-report"),
		bundle(ex("stale-cache-cleanup"), "d-stale-cache-cleanup"),
	}
	eval := []task.Ref{bundle(ex("stale-cache-cleanup"), "tb/stale-cache-cleanup")}
	manifest, err := store.PutJSON(ctx, st, "m.json", task.Pool{Name: "m", Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Store: st, TaskCache: t.TempDir()}
	res, err := a.PoolSimilarityStored(ctx, StoredSimilarityInput{Manifest: manifest, Eval: eval, Config: audit.DefaultConfig(), Key: "sim.json"})
	if err != nil {
		t.Fatal(err)
	}
	var sims map[string]audit.Similarity
	if err := store.GetJSON(ctx, st, res.Ref, &sims); err != nil {
		t.Fatal(err)
	}
	if res.Tasks != 4 || len(sims) != 2 {
		t.Fatalf("%d tasks, stored %v: want 4 tasks and two similarities", res.Tasks, sims)
	}
	if s := sims[tasks[1].ID]; s.DuplicateOf != "a-log-level-counter" || s.Duplicate < 0.85 {
		t.Errorf("the copy: %+v, want a near duplicate of a-log-level-counter", s)
	}
	if s := sims[tasks[3].ID]; s.ContaminatedBy != "tb/stale-cache-cleanup" || s.Contamination != 1 {
		t.Errorf("the eval set's task: %+v, want contaminated by tb/stale-cache-cleanup at 1", s)
	}
	if _, err := a.PoolSimilarityStored(ctx, StoredSimilarityInput{Manifest: store.Ref{URI: manifest.URI + ".missing"}, Key: "x.json"}); err == nil {
		t.Error("a missing manifest was read")
	}
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
