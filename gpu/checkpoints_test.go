package gpu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/store"
)

func writeCheckpointDir(t *testing.T, files map[string]string, version string) string {
	t.Helper()
	dir := t.TempDir()
	m := Manifest{WeightVersion: version}
	for n, body := range files {
		os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644)
		sum := sha256.Sum256([]byte(body))
		m.Files = append(m.Files, ManifestFile{Name: n, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(body))})
	}
	b, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
	return dir
}

func TestCheckpointRecordsAndManifestFallback(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := writeCheckpointDir(t, map[string]string{"model.safetensors": "weights", "model.json": "{}"}, "v3")
	ck, err := ImportCheckpoint(ctx, st, dir, "camp/e1/step-0003")
	if err != nil {
		t.Fatal(err)
	}
	if ck.WeightVersion != "v3" || len(ck.Files) != 3 {
		t.Fatalf("imported %+v", ck)
	}
	got, err := FindCheckpoint(ctx, st, "camp/e1/step-0003")
	if err != nil || got.WeightVersion != "v3" || got.Files["model.safetensors"].SHA256 != ck.Files["model.safetensors"].SHA256 {
		t.Fatalf("found %+v, %v", got, err)
	}
	if _, err := FindCheckpoint(ctx, st, "camp/e1/step-0004"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a checkpoint never saved: %v", err)
	}

	// Saved before records existed: found through its manifest.
	rec := filepath.Join(st.Root, strings.TrimPrefix(CheckpointKey("camp/e1/step-0003"), "/"))
	os.Remove(rec)
	os.Remove(rec + ".ref")
	got, err = FindCheckpoint(ctx, st, "camp/e1/step-0003")
	if err != nil || got.WeightVersion != "v3" || len(got.Files) != 3 {
		t.Fatalf("from the manifest: %+v, %v", got, err)
	}
	// An upload cut short (a listed file missing) is not a checkpoint.
	p := filepath.Join(filepath.Dir(rec), "model.safetensors")
	os.Remove(p)
	os.Remove(p + ".ref")
	if _, err := FindCheckpoint(ctx, st, "camp/e1/step-0003"); err == nil || !strings.Contains(err.Error(), "incomplete") || !strings.Contains(err.Error(), "model.safetensors") {
		t.Errorf("an incomplete checkpoint: %v", err)
	}

	// A directory whose file does not match its manifest is refused, naming the file.
	bad := writeCheckpointDir(t, map[string]string{"model.safetensors": "weights"}, "v4")
	os.WriteFile(filepath.Join(bad, "model.safetensors"), []byte("half-writ"), 0o644)
	if _, err := ImportCheckpoint(ctx, st, bad, "bad"); err == nil || !strings.Contains(err.Error(), "model.safetensors") {
		t.Errorf("a changed file: %v", err)
	}
	if _, err := FindCheckpoint(ctx, st, "bad"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused import left a checkpoint: %v", err)
	}
}
