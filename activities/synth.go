package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/synth"
	"github.com/t1flow/t1flow/internal/task"
)

// SynthSpec picks the synthesizer.
type SynthSpec struct {
	Kind          string  `json:"kind"` // procedural (default) or llm
	StepsPerRound int     `json:"steps_per_round,omitempty"`
	Endpoint      string  `json:"endpoint,omitempty"` // llm: OpenAI-compatible base URL
	Model         string  `json:"model,omitempty"`
	APIKeyEnv     string  `json:"api_key_env,omitempty"`
	Temperature   float64 `json:"temperature,omitempty"`
}

// Validate names the field at fault.
func (s SynthSpec) Validate() error {
	switch s.Kind {
	case "", "procedural":
		return nil
	case "llm":
		if s.Endpoint == "" || s.Model == "" {
			return fmt.Errorf("synthesizer llm: endpoint and model are required")
		}
		return nil
	}
	return fmt.Errorf("synthesizer %q: use procedural or llm", s.Kind)
}

// SynthesizeInput asks for one round's candidate.
type SynthesizeInput struct {
	Seed      task.Ref  `json:"seed"`
	Parent    task.Ref  `json:"parent"`
	Chain     int       `json:"chain"`
	Round     int       `json:"round"`
	Variation int       `json:"variation"`
	RNGSeed   int64     `json:"rng_seed"`
	Steps     []string  `json:"steps"` // lineage so far
	Synth     SynthSpec `json:"synth"`
}

// SynthesizeResult is the candidate task, bundled in the store.
type SynthesizeResult struct {
	Task       task.Ref `json:"task"`
	Steps      []string `json:"steps"` // this round's step kinds
	Categories []string `json:"categories"`
	By         string   `json:"by"`
}

func (a *Activities) synthesizer(s SynthSpec) synth.Synthesizer {
	if s.Kind == "llm" {
		key := ""
		if s.APIKeyEnv != "" {
			key = os.Getenv(s.APIKeyEnv)
		}
		return synth.LLM{Chat: &inference.ChatClient{BaseURL: s.Endpoint, Model: s.Model, APIKey: key}, Model: s.Model, Temperature: s.Temperature}
	}
	return synth.Procedural{StepsPerRound: s.StepsPerRound}
}

// Synthesize proposes and applies one round to the parent task. The same
// inputs give the same task (the RNG derives from them), so a retry after a
// crash finds the bundle already stored.
func (a *Activities) Synthesize(ctx context.Context, in SynthesizeInput) (SynthesizeResult, error) {
	if err := in.Synth.Validate(); err != nil {
		return SynthesizeResult{}, errs.BadInputf("%v", err)
	}
	// Heartbeats while proposing (a model call may take minutes) and applying,
	// so a worker that dies mid-call is found within the heartbeat timeout.
	defer heartbeat.Every(ctx, 5*time.Second, nil)()
	parent, err := a.fetchTask(ctx, in.Parent)
	if err != nil {
		return SynthesizeResult{}, err
	}
	syn := a.synthesizer(in.Synth)
	prop, err := syn.Propose(ctx, parent, in.Round, synth.RNG(in.Seed.ID, in.RNGSeed, in.Chain, in.Round, in.Variation))
	var invalid *synth.InvalidOutputError
	if errors.As(err, &invalid) {
		return SynthesizeResult{}, errs.SynthesisRejectedf("%v", err)
	}
	if err != nil {
		// The endpoint failed us (unreachable, HTTP error, timeout): never a
		// rejection of the proposal. Retried; when retries run out the chain
		// fails naming the endpoint.
		return SynthesizeResult{}, errs.Infraf("synthesizer endpoint %s (model %q): %v", in.Synth.Endpoint, in.Synth.Model, err)
	}
	tmp, err := os.MkdirTemp("", "t1flow-synth-")
	if err != nil {
		return SynthesizeResult{}, errs.Infraf("%v", err)
	}
	defer os.RemoveAll(tmp)
	name := fmt.Sprintf("%s-c%dr%d", baseName(in.Seed.Name), in.Chain, in.Round)
	lin := synth.Lineage{Seed: in.Seed.ID, Round: in.Round, Parent: in.Parent.ID, Steps: in.Steps}
	t, err := synth.Apply(parent, filepath.Join(tmp, name), in.Round, prop, lin)
	if err != nil {
		return SynthesizeResult{}, errs.SynthesisRejectedf("round %d variation %d: %v", in.Round, in.Variation, err)
	}
	ref, err := task.Bundle(ctx, a.Store, t)
	if err != nil {
		return SynthesizeResult{}, errs.Infraf("bundle %s: %v", name, err)
	}
	res := SynthesizeResult{Task: ref, By: prop.By}
	for _, s := range prop.Steps {
		res.Steps = append(res.Steps, s.Kind)
		res.Categories = append(res.Categories, s.Category)
	}
	return res, nil
}

// baseName strips earlier rounds' suffixes, so names stay seed-cN-rM.
func baseName(n string) string {
	if i := strings.LastIndex(n, "-c"); i > 0 && strings.Contains(n[i:], "r") {
		return n[:i]
	}
	return n
}

// AuditStaticInput asks for the static part of the audit.
type AuditStaticInput struct {
	Task   task.Ref     `json:"task"`
	Config audit.Config `json:"config"`
}

// AuditStaticResult is the static analysis plus what Judge needs of the task.
type AuditStaticResult struct {
	Static audit.Static   `json:"static"`
	Info   audit.TaskInfo `json:"info"`
}

// AuditStatic reads the task: hidden requirements, leakage, shortcuts,
// clarity, solution steps and mutants.
func (a *Activities) AuditStatic(ctx context.Context, in AuditStaticInput) (AuditStaticResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return AuditStaticResult{}, err
	}
	s, err := audit.Analyze(t, in.Config)
	if err != nil {
		return AuditStaticResult{}, errs.TaskInvalidf("%s: %v", in.Task.Name, err)
	}
	return AuditStaticResult{Static: s, Info: audit.TaskInfo{Name: in.Task.Name, ID: t.ID, Category: t.Config.Category, Difficulty: t.Config.Difficulty}}, nil
}

// SimilarityInput is a pool and the eval task sets it must not overlap.
type SimilarityInput struct {
	Tasks  []task.Ref   `json:"tasks"`
	Eval   []task.Ref   `json:"eval"`
	Config audit.Config `json:"config"`
}

func (a *Activities) shingles(ctx context.Context, r task.Ref) (map[uint64]bool, error) {
	t, err := a.fetchTask(ctx, r)
	if err != nil {
		return nil, err
	}
	sol, _ := os.ReadFile(filepath.Join(t.Dir, task.SolutionFile))
	return audit.Shingles(t.Instruction+"\n"+string(sol), 5), nil
}

// PoolSimilarity finds near duplicates within the pool (the later of a pair,
// in name order, is the duplicate) and contamination against eval tasks.
func (a *Activities) PoolSimilarity(ctx context.Context, in SimilarityInput) (map[string]audit.Similarity, error) {
	return a.similarity(ctx, in.Tasks, in.Eval, in.Config)
}

// StoredSimilarityInput is PoolSimilarity over a stored task manifest (a
// task.Pool), its answer stored at Key: an audit sweep of any size.
type StoredSimilarityInput struct {
	Manifest store.Ref    `json:"manifest"`
	Eval     []task.Ref   `json:"eval"`
	Config   audit.Config `json:"config"`
	Key      string       `json:"key"`
}

// StoredSimilarity is where PoolSimilarityStored put its answer: task ID to
// similarity, for the tasks with a near duplicate or contamination only.
type StoredSimilarity struct {
	Ref   store.Ref `json:"ref"`
	Tasks int       `json:"tasks"` // in the manifest
}

// PoolSimilarityStored is PoolSimilarity for a sweep too large to pass its
// tasks or the answer inline (Temporal's 2 MB payloads).
func (a *Activities) PoolSimilarityStored(ctx context.Context, in StoredSimilarityInput) (StoredSimilarity, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // reading the manifest, storing the answer (workflows.ControlHeartbeat)
	tasks, err := task.ReadManifest(ctx, a.Store, in.Manifest)
	if err != nil {
		return StoredSimilarity{}, err
	}
	sims, err := a.similarity(ctx, tasks, in.Eval, in.Config)
	if err != nil {
		return StoredSimilarity{}, err
	}
	for id, s := range sims {
		if s == (audit.Similarity{}) {
			delete(sims, id)
		}
	}
	ref, err := store.PutJSON(ctx, a.Store, in.Key, sims)
	if err != nil {
		return StoredSimilarity{}, errs.Infraf("store %s: %v", in.Key, err)
	}
	return StoredSimilarity{Ref: ref, Tasks: len(tasks)}, nil
}

// similarity is each task's nearest earlier duplicate (in name order) and
// its most contaminating eval task, by shingle overlap.
func (a *Activities) similarity(ctx context.Context, in, eval []task.Ref, cfg audit.Config) (map[string]audit.Similarity, error) {
	var read, compared atomic.Int64 // the heartbeat's details
	defer heartbeat.Every(ctx, 5*time.Second, func(context.Context) any {
		return fmt.Sprintf("%d of %d tasks read, %d compared", read.Load(), len(in), compared.Load())
	})()
	tasks := append([]task.Ref{}, in...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Name < tasks[j].Name })
	sh := make([]map[uint64]bool, len(tasks))
	for i, t := range tasks {
		s, err := a.shingles(ctx, t)
		if err != nil {
			return nil, err
		}
		sh[i] = s
		read.Store(int64(i + 1))
	}
	var evals []map[uint64]bool
	for _, e := range eval {
		s, err := a.shingles(ctx, e)
		if err != nil {
			return nil, err
		}
		evals = append(evals, s)
	}
	dup, con, err := audit.Similarities(sh, evals, cfg.DuplicateJaccard, cfg.ContaminationShare, func(i int) error {
		compared.Store(int64(i))
		return ctx.Err() // a timed-out attempt stops comparing
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]audit.Similarity, len(tasks))
	for i, t := range tasks {
		var sim audit.Similarity
		if d := dup[i]; d.Index >= 0 {
			sim.Duplicate, sim.DuplicateOf = d.Score, tasks[d.Index].Name
		}
		if c := con[i]; c.Index >= 0 {
			sim.Contamination, sim.ContaminatedBy = c.Score, eval[c.Index].Name
		}
		out[t.ID] = sim
	}
	return out, nil
}

// ImportInput adds stored tasks to a pool.
type ImportInput struct {
	Pool  string     `json:"pool"`
	Tasks []task.Ref `json:"tasks"`
}

// ImportToPool merges task refs into a pool; it returns how many were new.
func (a *Activities) ImportToPool(ctx context.Context, in ImportInput) (int, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	_, added, err := task.ImportRefs(ctx, a.Store, in.Pool, in.Tasks)
	if err != nil {
		var nf = store.ErrNotFound
		if errors.Is(err, nf) {
			return 0, errs.Infraf("%v", err)
		}
		return 0, errs.BadInputf("%v", err)
	}
	return added, nil
}

// SampleInput picks tasks from a pool.
type SampleInput struct {
	Pool  string `json:"pool"`
	N     int    `json:"n"`     // 0: all
	Seed  string `json:"seed"`  // the same seed picks the same tasks
	Cycle bool   `json:"cycle"` // repeat tasks when the pool has fewer than N
}

// SampleTasks returns N tasks of a pool in an order fixed by the seed.
func (a *Activities) SampleTasks(ctx context.Context, in SampleInput) ([]task.Ref, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	p, err := task.LoadPool(ctx, a.Store, in.Pool)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errs.BadInputf("pool %q does not exist (import or synthesize tasks into it first)", in.Pool)
	}
	if err != nil {
		return nil, errs.Infraf("%v", err)
	}
	refs := append([]task.Ref{}, p.Tasks...)
	if in.N <= 0 {
		return refs, nil
	}
	key := func(r task.Ref) string {
		h := sha256.Sum256([]byte(in.Seed + "/" + r.ID))
		return hex.EncodeToString(h[:])
	}
	sort.Slice(refs, func(i, j int) bool { return key(refs[i]) < key(refs[j]) })
	if !in.Cycle {
		return refs[:min(in.N, len(refs))], nil
	}
	// Cycle through the pool when a step asks for more tasks than it holds.
	out := make([]task.Ref, 0, in.N)
	for i := 0; i < in.N && len(refs) > 0; i++ {
		out = append(out, refs[i%len(refs)])
	}
	return out, nil
}
