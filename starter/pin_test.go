package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/store"
)

// A checkpoint the starter resolves (for an eval or a campaign's init) is
// pinned, so its campaign's checkpoints.keep_last never deletes it.
func TestResolvedCheckpointsArePinned(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("w"), 0o644)
	m, _ := json.Marshal(gpu.Manifest{WeightVersion: "v2", Files: []gpu.ManifestFile{{Name: "model.safetensors"}}})
	os.WriteFile(filepath.Join(dir, "manifest.json"), m, 0o644)
	if _, err := gpu.ImportCheckpoint(ctx, st, dir, "camp/e1/step-0002"); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveCheckpoint(ctx, nil, st, "camp/e1/step-0002"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Lookup(ctx, gpu.CheckpointPinKey("camp/e1/step-0002")); err != nil {
		t.Fatalf("the resolved checkpoint is not pinned: %v", err)
	}
	res, err := (&gpu.Activities{Store: st, WorkDir: t.TempDir()}).PruneCheckpoints(ctx, gpu.PruneInput{Names: []string{"camp/e1/step-0002"}})
	if err != nil || len(res.Deleted) != 0 || len(res.Pinned) != 1 {
		t.Fatalf("prune of a pinned checkpoint: %+v %v", res, err)
	}
}
