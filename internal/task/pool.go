package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
)

// Ref is what workflows carry for a task: its identity, its labels for
// reports, and a claim check on its bundled directory.
type Ref struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Category   string    `json:"category,omitempty"`
	Difficulty string    `json:"difficulty,omitempty"`
	Bundle     store.Ref `json:"bundle"`
}

// Pool is a named set of imported tasks.
type Pool struct {
	Name  string `json:"name"`
	Tasks []Ref  `json:"tasks"`
}

var poolName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// ValidatePoolName rejects names that would not make a clean store key.
func ValidatePoolName(name string) error {
	if !poolName.MatchString(name) {
		return fmt.Errorf("--pool %q: use letters, digits, '.', '_' and '-' (at most 100)", name)
	}
	return nil
}

func poolKey(name string) string { return "pools/" + name + ".json" }

// Bundle stores the task directory as a tar and returns its Ref.
func Bundle(ctx context.Context, s store.Store, t *Task) (Ref, error) {
	b, err := TarBytes(t.Dir, "", "")
	if err != nil {
		return Ref{}, fmt.Errorf("%s: %w", t.Dir, err)
	}
	key := "tasks/" + t.ID + ".tar"
	br, err := s.Lookup(ctx, key)
	if err != nil {
		br, err = s.Put(ctx, key, bytes.NewReader(b))
		if err != nil {
			return Ref{}, err
		}
	}
	return Ref{ID: t.ID, Name: t.Name, Category: t.Config.Category, Difficulty: t.Config.Difficulty, Bundle: br}, nil
}

// ImportRefs merges already-bundled tasks into the named pool.
func ImportRefs(ctx context.Context, s store.Store, pool string, refs []Ref) (*Pool, int, error) {
	if err := ValidatePoolName(pool); err != nil {
		return nil, 0, err
	}
	p, err := LoadPool(ctx, s, pool)
	if errors.Is(err, store.ErrNotFound) {
		p, err = &Pool{Name: pool}, nil
	}
	if err != nil {
		return nil, 0, err
	}
	have := map[string]bool{}
	for _, r := range p.Tasks {
		have[r.ID] = true
	}
	added := 0
	for _, r := range refs {
		if !have[r.ID] {
			p.Tasks = append(p.Tasks, r)
			have[r.ID] = true
			added++
		}
	}
	sort.Slice(p.Tasks, func(i, j int) bool { return p.Tasks[i].Name < p.Tasks[j].Name })
	if _, err := store.PutJSON(ctx, s, poolKey(pool), p); err != nil {
		return nil, 0, err
	}
	return p, added, nil
}

// Import bundles tasks into the store and merges them into the named pool.
// A task already in the pool (same ID) is not added twice.
func Import(ctx context.Context, s store.Store, pool string, tasks []*Task) (*Pool, int, error) {
	if err := ValidatePoolName(pool); err != nil {
		return nil, 0, err
	}
	refs := make([]Ref, 0, len(tasks))
	for _, t := range tasks {
		r, err := Bundle(ctx, s, t)
		if err != nil {
			return nil, 0, err
		}
		refs = append(refs, r)
	}
	return ImportRefs(ctx, s, pool, refs)
}

// LoadPool reads a pool; a missing pool wraps store.ErrNotFound.
func LoadPool(ctx context.Context, s store.Store, name string) (*Pool, error) {
	if err := ValidatePoolName(name); err != nil {
		return nil, err
	}
	ref, err := s.Lookup(ctx, poolKey(name))
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", name, err)
	}
	var p Pool
	if err := store.GetJSON(ctx, s, ref, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Fetch materialises a bundled task under cacheDir/<id> (once; later calls
// reuse it) and loads it. The directory appears whole or not at all.
func Fetch(ctx context.Context, s store.Store, ref Ref, cacheDir string) (*Task, error) {
	dir := filepath.Join(cacheDir, ref.ID)
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err != nil {
		b, err := s.Get(ctx, ref.Bundle)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return nil, err
		}
		tmp, err := os.MkdirTemp(cacheDir, ".tmp-"+ref.ID+"-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		if err := Untar(bytes.NewReader(b), tmp); err != nil {
			return nil, fmt.Errorf("task bundle %s: %w", ref.Bundle.URI, err)
		}
		if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
			if _, serr := os.Stat(filepath.Join(dir, ConfigFile)); serr != nil {
				return nil, err
			}
		}
	}
	t, err := Load(dir)
	if err != nil {
		return nil, err
	}
	if t.ID != ref.ID {
		return nil, fmt.Errorf("task bundle %s holds task %s, expected %s", ref.Bundle.URI, t.ID, ref.ID)
	}
	t.Name = ref.Name
	return t, nil
}

// ReadManifest reads a task manifest (a stored Pool, a sweep's
// task_manifest) and checks it: at least one task, each with an ID and a
// bundle, no ID twice (workflow IDs are made of it). A manifest missing,
// corrupt or failing the check is a BadInput error naming it; a store that
// cannot be read, an InfraError.
func ReadManifest(ctx context.Context, st store.Store, ref store.Ref) ([]Ref, error) {
	var p Pool
	err := store.GetJSON(ctx, st, ref, &p)
	var ce *store.ChecksumError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errs.BadInputf("task_manifest %s: not in the store", ref.URI)
	case errors.As(err, &ce):
		return nil, errs.BadInputf("task_manifest: %v", err)
	case err != nil:
		return nil, errs.Infraf("task_manifest %s: %v", ref.URI, err)
	}
	if len(p.Tasks) == 0 {
		return nil, errs.BadInputf("task_manifest %s: tasks is empty", ref.URI)
	}
	seen := make(map[string]int, len(p.Tasks))
	for i, t := range p.Tasks {
		switch {
		case t.ID == "":
			return nil, errs.BadInputf("task_manifest %s: tasks[%d].id is empty", ref.URI, i)
		case t.Bundle.URI == "":
			return nil, errs.BadInputf("task_manifest %s: tasks[%d] (%s): bundle.uri is empty (import the task first)", ref.URI, i, t.ID)
		}
		if j, dup := seen[t.ID]; dup {
			return nil, errs.BadInputf("task_manifest %s: tasks[%d] and tasks[%d] are both %s", ref.URI, j, i, t.ID)
		}
		seen[t.ID] = i
	}
	return p.Tasks, nil
}
