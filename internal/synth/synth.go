package synth

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/t1flow/t1flow/internal/task"
)

// Lineage says where a synthesized task came from.
type Lineage struct {
	Seed   string   `json:"seed" toml:"synth_seed"`     // the seed task's ID
	Round  int      `json:"round" toml:"synth_round"`   // 1 for the first extension
	Parent string   `json:"parent" toml:"synth_parent"` // the parent task's ID
	Steps  []string `json:"steps" toml:"synth_steps"`   // generator of every round so far
}

// Proposal is one round's candidate: its steps and why it looks the way it does.
type Proposal struct {
	Steps []Step
	By    string // synthesizer name
}

// Synthesizer proposes the next round's steps for a task.
type Synthesizer interface {
	Name() string
	Propose(ctx context.Context, t *task.Task, round int, rng *rand.Rand) (Proposal, error)
}

// RNG derives a round's generator from (seed task, RNG seed, chain, round,
// variation), so a run is reproducible and a rejected round can try again.
func RNG(seedID string, rngSeed int64, chain, round, variation int) *rand.Rand {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/%d/%d/%d", seedID, rngSeed, chain, round, variation)))
	return rand.New(rand.NewSource(int64(binary.LittleEndian.Uint64(h[:8]))))
}

// Procedural composes steps from the generator library, offline.
type Procedural struct {
	StepsPerRound int // default 1
}

func (Procedural) Name() string { return "procedural" }

// Propose draws the round's generators and their parameters from rng.
func (p Procedural) Propose(_ context.Context, t *task.Task, round int, rng *rand.Rand) (Proposal, error) {
	n := max(p.StepsPerRound, 1)
	var steps []Step
	for i := 0; i < n; i++ {
		g := Generators[rng.Intn(len(Generators))]
		tag := fmt.Sprintf("r%d%c", round, 'a'+rune(i))
		s := g.Make(rng, tag)
		s.Kind, s.Category = g.Name, g.Category
		steps = append(steps, s)
	}
	return Proposal{Steps: steps, By: "procedural"}, nil
}

// CanonicalTestScript runs every test file under /tests and writes JUnit
// results, so steps' test files join the verifier as they are added.
const CanonicalTestScript = `#!/bin/bash
# Runs every held-out test file; per-assertion results go to /logs/verifier/junit.xml.
mkdir -p /logs/verifier
cd /tests
python3 -m pytest -q -p no:cacheprovider --rootdir=/tests --junitxml=/logs/verifier/junit.xml /tests
`

// Apply writes the extended task into out: the parent's files, plus each
// step's setup (Dockerfile), solution (solve.sh), tests (a new test file) and
// instruction, and the lineage in task.toml. It validates the result.
func Apply(parent *task.Task, out string, round int, prop Proposal, lin Lineage) (*task.Task, error) {
	if len(prop.Steps) == 0 {
		return nil, fmt.Errorf("round %d: no steps proposed", round)
	}
	if err := copyDir(parent.Dir, out); err != nil {
		return nil, err
	}
	var setup, sol, instr []string
	for i, s := range prop.Steps {
		if strings.TrimSpace(s.Solution) == "" || !strings.Contains(s.Tests, "def test_") || strings.TrimSpace(s.Instruction) == "" {
			return nil, fmt.Errorf("round %d step %d (%s): solution, tests (with test functions) and instruction are all required", round, i, s.Kind)
		}
		if strings.Contains(s.Setup, "\n") {
			return nil, fmt.Errorf("round %d step %d (%s): setup must be one shell line", round, i, s.Kind)
		}
		if s.Setup != "" {
			setup = append(setup, "RUN "+s.Setup)
		}
		sol = append(sol, fmt.Sprintf("\n# step %d.%d: %s\n%s", round, i+1, s.Kind, strings.TrimRight(s.Solution, "\n")))
		instr = append(instr, "- "+strings.TrimSpace(s.Instruction))
		tf := filepath.Join(out, "tests", fmt.Sprintf("test_round_%d_%d.py", round, i+1))
		if err := os.WriteFile(tf, []byte(s.Tests), 0o644); err != nil {
			return nil, err
		}
	}
	if err := appendFile(filepath.Join(out, task.DockerfileFile), "\n"+strings.Join(setup, "\n")+"\n"); err != nil {
		return nil, err
	}
	if err := appendFile(filepath.Join(out, task.SolutionFile), strings.Join(sol, "\n")+"\n"); err != nil {
		return nil, err
	}
	ins := "\n"
	if round == 1 {
		ins += "\n## Further requirements\n\n"
	}
	if err := appendFile(filepath.Join(out, task.InstructionFile), ins+strings.Join(instr, "\n")+"\n"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, task.TestScriptFile), []byte(CanonicalTestScript), 0o755); err != nil {
		return nil, err
	}
	for _, s := range prop.Steps {
		lin.Steps = append(lin.Steps, s.Kind)
	}
	if err := writeLineage(filepath.Join(out, task.ConfigFile), parent, lin, prop.By); err != nil {
		return nil, err
	}
	return task.Load(out)
}

// writeLineage rewrites task.toml with the lineage and a difficulty that
// follows the solution's length.
func writeLineage(path string, parent *task.Task, lin Lineage, by string) error {
	var doc map[string]any
	if _, err := toml.DecodeFile(path, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["synth_seed"], meta["synth_round"], meta["synth_parent"], meta["synth_steps"], meta["synth_by"] = lin.Seed, lin.Round, lin.Parent, lin.Steps, by
	switch n := len(lin.Steps); {
	case n >= 4:
		meta["difficulty"] = "hard"
	case n >= 2:
		meta["difficulty"] = "medium"
	}
	if meta["category"] == nil && len(lin.Steps) > 0 {
		meta["category"] = categoryOf(lin.Steps[0])
	}
	doc["metadata"] = meta
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return toml.NewEncoder(f).Encode(doc)
}

func categoryOf(kind string) string {
	for _, g := range Generators {
		if g.Name == kind {
			return g.Category
		}
	}
	return ""
}

func appendFile(p, s string) error {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}
