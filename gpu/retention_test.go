package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// On the real reference trainer and server: a save leaves no copy under
// checkpoints/ once stored, the load after it uses the saved files instead
// of a download, and after each load only what is loaded or served stays.
func TestLocalCheckpointCopiesAreBounded(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	root := filepath.Join(r.acts.WorkDir, "checkpoints")
	fetched := filepath.Join(root, "fetched")
	c0, c1 := ids.Clean("camp/step-0000"), ids.Clean("camp/step-0001")

	// What a crash between a save and its upload left behind.
	os.MkdirAll(filepath.Join(root, "camp_crashed"), 0o755)
	os.WriteFile(filepath.Join(root, "camp_crashed", "model.safetensors"), []byte("half"), 0o644)

	ck0, err := r.acts.TrainerSave(ctx, SaveInput{Name: "camp/step-0000"})
	if err != nil {
		t.Fatal(err)
	}
	if got := entries(t, root); !slices.Equal(got, []string{"fetched"}) {
		t.Fatalf("after a stored save checkpoints/ holds %v, want only fetched/", got)
	}
	saved, err := os.Stat(filepath.Join(fetched, c0, "model.safetensors"))
	if err != nil {
		t.Fatalf("the stored save was not kept for the load: %v", err)
	}
	if wv, err := r.acts.InferenceLoad(ctx, ck0); err != nil || wv != ck0.WeightVersion {
		t.Fatalf("load: %q %v", wv, err)
	}
	loaded, err := os.Stat(filepath.Join(fetched, c0, "model.safetensors"))
	if err != nil || !os.SameFile(saved, loaded) {
		t.Fatalf("the load downloaded the checkpoint again instead of using the saved files (%v)", err)
	}

	ck1, err := r.acts.TrainerSave(ctx, SaveInput{Name: "camp/step-0001"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.acts.InferenceLoadAll(ctx, LoadInput{Checkpoint: ck1}); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, fetched); !slices.Equal(got, []string{c1, c1 + ".serve"}) {
		t.Fatalf("after loading step-0001 fetched/ holds %v, want step-0001 and its serving dir only", got)
	}

	// The trainer goes back to step-0000 (downloaded again); inference still
	// serves step-0001, whose serving dir stays for a restarted engine.
	if _, err := r.acts.TrainerLoad(ctx, ck0); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, fetched); !slices.Equal(got, []string{c0, c1 + ".serve"}) {
		t.Fatalf("after a trainer load fetched/ holds %v, want step-0000 and step-0001's serving dir", got)
	}
	if info, err := r.acts.InferenceInfo(ctx); err != nil || info.WeightVersion != ck1.WeightVersion {
		t.Fatalf("inference info: %+v %v", info, err)
	}
}

// noDelete is a store that cannot delete.
type noDelete struct{ store.Store }

func TestPruneCheckpointsSparesPinnedAndFinishesACutShortDeletion(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	a := &Activities{Store: st, WorkDir: work}
	for _, n := range []string{"camp/e/step-0001", "camp/e/step-0002", "camp/e/step-0003"} {
		if _, err := ImportCheckpoint(ctx, st, writeCheckpointDir(t, map[string]string{"model.safetensors": "w-" + n}, "v1"), n); err != nil {
			t.Fatal(err)
		}
	}
	if err := PinCheckpoint(ctx, st, "camp/e/step-0002", "test eval"); err != nil {
		t.Fatal(err)
	}
	// A deletion cut short: the weights went, the record did not.
	if err := st.Delete(ctx, "checkpoints/"+ids.Clean("camp/e/step-0003")+"/model.safetensors"); err != nil {
		t.Fatal(err)
	}
	// A local copy of a pruned checkpoint goes too.
	local := a.fetchedDir("camp/e/step-0001")
	os.MkdirAll(local, 0o755)

	res, err := a.PruneCheckpoints(ctx, PruneInput{Names: []string{"camp/e/step-0001", "camp/e/step-0002", "camp/e/step-0003"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Deleted, []string{"camp/e/step-0001", "camp/e/step-0003"}) || !slices.Equal(res.Pinned, []string{"camp/e/step-0002"}) {
		t.Fatalf("prune: %+v", res)
	}
	if res.Bytes <= int64(len("w-camp/e/step-0001")) {
		t.Errorf("freed bytes %d do not count the deleted files", res.Bytes)
	}
	for _, n := range []string{"camp/e/step-0001", "camp/e/step-0003"} {
		if _, err := FindCheckpoint(ctx, st, n); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s is still found after its deletion: %v", n, err)
		}
		if got := entries(t, filepath.Join(st.Root, "checkpoints", ids.Clean(n))); len(got) != 0 {
			t.Errorf("%s left %v in the store", n, got)
		}
	}
	if _, err := FindCheckpoint(ctx, st, "camp/e/step-0002"); err != nil {
		t.Errorf("the pinned checkpoint was deleted: %v", err)
	}
	if _, err := os.Stat(local); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the local copy of a pruned checkpoint stays: %v", err)
	}
	// A retry after the deletions is no error.
	if res, err := a.PruneCheckpoints(ctx, PruneInput{Names: []string{"camp/e/step-0001"}}); err != nil || res.Bytes != 0 || len(res.Deleted) != 1 {
		t.Fatalf("retried prune: %+v %v", res, err)
	}
	b := &Activities{Store: noDelete{st}, WorkDir: work}
	_, err = b.PruneCheckpoints(ctx, PruneInput{Names: []string{"camp/e/step-0002"}})
	if ae := (*temporal.ApplicationError)(nil); !errors.As(err, &ae) || ae.Type() != errs.BadInput || !strings.Contains(err.Error(), "checkpoints.keep_last") {
		t.Fatalf("a store that cannot delete: %v, want a bad-input error naming checkpoints.keep_last", err)
	}
}
