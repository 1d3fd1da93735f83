package gpu

// Disk use of checkpoints (docs/campaigns.md, "Checkpoints and disk"). The
// artifact store holds the durable copy of each checkpoint; the trainer's
// host keeps only what a running job needs:
//
//   - checkpoints/<name>/ is where the trainer writes a save. Once the store
//     holds every file and the record (the record goes last), it is moved to
//     fetched/<name>/, where the load into inference that follows finds it
//     (checked by sha256) instead of downloading it again. A save cut short
//     by a crash is removed by the next save.
//   - fetched/<name>/ (and <name>.serve/, hard links to its policy files) are
//     the copies an engine or the trainer loaded. After each load, every one
//     but the one just loaded, the one the local engine verifiably serves (a
//     restarted engine is given it again) and those a running load holds is
//     removed.
//
// The trainer's own committed state (trainer/state/: weights, critic and
// the optimiser) is one copy, replaced at every commit: saved checkpoints
// carry no optimiser state, so only the trainer's newest state resumes
// with its optimiser, and a checkpoint loaded into a trainer starts a fresh one.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
)

// held counts the local checkpoint directories running loads use, so a
// prune beside them leaves them alone.
type held struct {
	mu   sync.Mutex
	dirs map[string]int
}

func (a *Activities) fetchedDir(name string) string {
	return filepath.Join(a.WorkDir, "checkpoints", "fetched", ids.Clean(name))
}

// hold marks dir (and its .serve and .tmp siblings) in use until release.
func (a *Activities) hold(dir string) (release func()) {
	a.held.mu.Lock()
	defer a.held.mu.Unlock()
	if a.held.dirs == nil {
		a.held.dirs = map[string]int{}
	}
	a.held.dirs[dir]++
	return func() {
		a.held.mu.Lock()
		defer a.held.mu.Unlock()
		if a.held.dirs[dir]--; a.held.dirs[dir] <= 0 {
			delete(a.held.dirs, dir)
		}
	}
}

// pruneFetched removes the fetched copies no one needs: all but keep, the
// local engine's verified one, and those held (see the package note above).
func (a *Activities) pruneFetched(keep ...string) {
	root := filepath.Join(a.WorkDir, "checkpoints", "fetched")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	a.held.mu.Lock()
	defer a.held.mu.Unlock()
	spare := map[string]bool{}
	mark := func(dir string) {
		for _, s := range []string{"", ".tmp", ".serve", ".serve.tmp"} {
			spare[dir+s] = true
		}
	}
	for _, k := range keep {
		mark(k)
	}
	for d := range a.held.dirs {
		mark(d)
	}
	if s, ok := a.lastServed(); ok {
		spare[s.Dir] = true // its .serve directory only: the engine reloads that
	}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if !spare[p] {
			os.RemoveAll(p)
		}
	}
}

// dropStaleSaves removes what a crash left under checkpoints/ between a
// trainer's save and its move to fetched/: any save directory but the one
// about to be written. Saves on one trainer never overlap (its lease).
func (a *Activities) dropStaleSaves(except string) {
	root := filepath.Join(a.WorkDir, "checkpoints")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if p := filepath.Join(root, e.Name()); e.Name() != "fetched" && p != except {
			os.RemoveAll(p)
		}
	}
}

// keepSaved moves a save whose upload is complete to fetched/, for the load
// that follows; where a running load holds that name, the save is removed.
func (a *Activities) keepSaved(dir, name string) {
	dst := a.fetchedDir(name)
	a.held.mu.Lock()
	busy := a.held.dirs[dst] > 0
	a.held.mu.Unlock()
	if !busy && os.MkdirAll(filepath.Dir(dst), 0o755) == nil && os.RemoveAll(dst) == nil && os.Rename(dir, dst) == nil {
		return
	}
	os.RemoveAll(dir)
}

// haveLocal says whether dir holds exactly ck's files (sizes and sha256).
func haveLocal(dir string, ck Checkpoint) bool {
	for n, ref := range ck.Files {
		f, err := os.Open(filepath.Join(dir, filepath.Base(n)))
		if err != nil {
			return false
		}
		h := sha256.New()
		m, err := io.Copy(h, f)
		f.Close()
		if err != nil || m != ref.Bytes || hex.EncodeToString(h.Sum(nil)) != ref.SHA256 {
			return false
		}
	}
	return len(ck.Files) > 0
}

// CheckpointPinKey marks a checkpoint that something outside its campaign
// uses (an eval sweep over it, a campaign started from it): the campaign's
// retention never deletes it.
func CheckpointPinKey(name string) string { return "checkpoints/" + ids.Clean(name) + "/pinned.json" }

// PinCheckpoint records that by uses the checkpoint name.
func PinCheckpoint(ctx context.Context, st store.Store, name, by string) error {
	_, err := store.PutJSON(ctx, st, CheckpointPinKey(name), map[string]string{"by": by, "at": time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return fmt.Errorf("checkpoint %s: pin it against deletion: %w", name, err)
	}
	return nil
}

// PruneInput names checkpoints a campaign's retention no longer keeps.
type PruneInput struct {
	Names []string `json:"names"`
}

// PruneResult is what a prune deleted and what it kept of those asked.
type PruneResult struct {
	Deleted []string `json:"deleted"`
	Pinned  []string `json:"pinned,omitempty"` // kept: pinned by an eval or another campaign
	Bytes   int64    `json:"bytes"`            // store bytes freed (0 for one a cut-short earlier try deleted)
}

// PruneCheckpoints deletes checkpoints from the store (and this host's
// fetched copies), skipping pinned ones. The files go first and the record
// last, so a deletion cut short is finished by the retry, which finds the
// record still there.
func (a *Activities) PruneCheckpoints(ctx context.Context, in PruneInput) (PruneResult, error) {
	out := PruneResult{Deleted: []string{}}
	del, ok := a.Store.(store.Deleter)
	if !ok {
		return out, errs.BadInputf("checkpoints.keep_last: the artifact store (%T) cannot delete; set checkpoints.keep_last = 0 (keep all)", a.Store)
	}
	for _, name := range in.Names {
		if _, err := a.Store.Lookup(ctx, CheckpointPinKey(name)); err == nil {
			out.Pinned = append(out.Pinned, name)
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return out, errs.Infraf("checkpoint %s: pin: %v", name, err)
		}
		n, err := a.deleteCheckpoint(ctx, del, name)
		if err != nil {
			return out, err
		}
		out.Deleted, out.Bytes = append(out.Deleted, name), out.Bytes+n
		a.removeFetched(name)
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Info("checkpoint deleted by retention", "checkpoint", name, "bytes", n)
			activity.RecordHeartbeat(ctx, name)
		}
	}
	return out, nil
}

func (a *Activities) deleteCheckpoint(ctx context.Context, del store.Deleter, name string) (int64, error) {
	ck, err := FindCheckpoint(ctx, a.Store, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil // gone already
	}
	if err != nil {
		return 0, errs.Infraf("%v", err)
	}
	var files []string
	var n int64
	for f, ref := range ck.Files {
		if f != "manifest.json" {
			files = append(files, f)
		}
		n += ref.Bytes
	}
	sort.Strings(files)
	prefix := "checkpoints/" + ids.Clean(name) + "/"
	for _, f := range append(files, "manifest.json") {
		if err := del.Delete(ctx, prefix+filepath.Base(f)); err != nil {
			return 0, errs.Infraf("checkpoint %s: %v", name, err)
		}
	}
	if err := del.Delete(ctx, CheckpointKey(name)); err != nil {
		return 0, errs.Infraf("checkpoint %s: %v", name, err)
	}
	return n, nil
}

// removeFetched removes this host's copies of a deleted checkpoint unless a
// load holds them or the local engine serves them.
func (a *Activities) removeFetched(name string) {
	dir := a.fetchedDir(name)
	a.held.mu.Lock()
	busy := a.held.dirs[dir] > 0
	a.held.mu.Unlock()
	s, served := a.lastServed()
	if busy || (served && s.Dir == dir+".serve") {
		return
	}
	for _, d := range []string{dir, dir + ".tmp", dir + ".serve", dir + ".serve.tmp"} {
		os.RemoveAll(d)
	}
}
