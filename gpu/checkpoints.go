package gpu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
)

// CheckpointKey is where a checkpoint's record lives in the artifact store.
func CheckpointKey(name string) string { return "checkpoints/" + ids.Clean(name) + "/checkpoint.json" }

func putCheckpointRecord(ctx context.Context, st store.Store, ck Checkpoint) error {
	if _, err := store.PutJSON(ctx, st, CheckpointKey(ck.Name), ck); err != nil {
		return fmt.Errorf("checkpoint %s: write its record: %w", ck.Name, err)
	}
	return nil
}

// FindCheckpoint reads the record of a saved checkpoint by name; it wraps
// store.ErrNotFound when none was (completely) saved under that name.
func FindCheckpoint(ctx context.Context, st store.Store, name string) (Checkpoint, error) {
	var ck Checkpoint
	ref, err := st.Lookup(ctx, CheckpointKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return fromManifest(ctx, st, name)
	}
	if err != nil {
		return ck, fmt.Errorf("checkpoint %q: %w", name, err)
	}
	if err := store.GetJSON(ctx, st, ref, &ck); err != nil {
		return ck, fmt.Errorf("checkpoint %q: %w", name, err)
	}
	if ck.Name == "" || ck.WeightVersion == "" || ck.Files["manifest.json"].URI == "" {
		return ck, fmt.Errorf("checkpoint %q: record %s has no name, weight_version or manifest.json", name, ref.URI)
	}
	return ck, nil
}

// fromManifest finds a checkpoint saved before records were written: every
// file its stored manifest lists must be there with the manifest's sha256,
// so an upload cut short is not taken for a checkpoint.
func fromManifest(ctx context.Context, st store.Store, name string) (Checkpoint, error) {
	prefix := "checkpoints/" + ids.Clean(name) + "/"
	mref, err := st.Lookup(ctx, prefix+"manifest.json")
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", name, err)
	}
	var m Manifest
	if err := store.GetJSON(ctx, st, mref, &m); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: manifest: %w", name, err)
	}
	ck := Checkpoint{Name: name, WeightVersion: m.WeightVersion, Files: map[string]store.Ref{"manifest.json": mref}}
	for _, f := range m.Files {
		ref, err := st.Lookup(ctx, prefix+filepath.Base(f.Name))
		if err != nil {
			return Checkpoint{}, fmt.Errorf("checkpoint %q is incomplete: %s: %w", name, f.Name, err)
		}
		if f.SHA256 != "" && ref.SHA256 != f.SHA256 {
			return Checkpoint{}, fmt.Errorf("checkpoint %q is incomplete: %s does not match the manifest's sha256", name, f.Name)
		}
		ck.Files[filepath.Base(f.Name)] = ref
	}
	if ck.WeightVersion == "" || len(m.Files) == 0 {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: manifest has no weight_version or files", name)
	}
	return ck, nil
}

// ImportCheckpoint stores a checkpoint directory (manifest.json and the files
// it lists, each checked against its sha256) under name.
func ImportCheckpoint(ctx context.Context, st store.Store, dir, name string) (Checkpoint, error) {
	mpath := filepath.Join(dir, "manifest.json")
	mb, err := os.ReadFile(mpath)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint directory %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return Checkpoint{}, fmt.Errorf("%s: %w", mpath, err)
	}
	if m.WeightVersion == "" || len(m.Files) == 0 {
		return Checkpoint{}, fmt.Errorf("%s: weight_version and files are required", mpath)
	}
	ck := Checkpoint{Name: name, WeightVersion: m.WeightVersion, Files: map[string]store.Ref{}}
	names := []string{}
	for _, f := range m.Files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.Base(f.Name)))
		if err != nil {
			return Checkpoint{}, fmt.Errorf("%s: file %s: %w", mpath, f.Name, err)
		}
		sum := sha256.Sum256(b)
		if f.SHA256 != "" && hex.EncodeToString(sum[:]) != f.SHA256 {
			return Checkpoint{}, fmt.Errorf("%s: file %s does not match its sha256 (half-written or changed)", mpath, f.Name)
		}
		names = append(names, f.Name)
	}
	sort.Strings(names)
	for _, n := range append(names, "manifest.json") {
		b, err := os.ReadFile(filepath.Join(dir, filepath.Base(n)))
		if err != nil {
			return Checkpoint{}, err
		}
		ref, err := st.Put(ctx, "checkpoints/"+ids.Clean(name)+"/"+filepath.Base(n), bytes.NewReader(b))
		if err != nil {
			return Checkpoint{}, fmt.Errorf("upload %s: %w", n, err)
		}
		ck.Files[filepath.Base(n)] = ref
	}
	return ck, putCheckpointRecord(ctx, st, ck)
}
