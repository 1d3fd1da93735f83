package synth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/task"
)

func grow(t *testing.T, seedDir string, rngSeed int64, rounds int) []*task.Task {
	t.Helper()
	seed, err := task.Load(seedDir)
	if err != nil {
		t.Fatal(err)
	}
	cur := seed
	var out []*task.Task
	lin := Lineage{Seed: seed.ID}
	for r := 1; r <= rounds; r++ {
		prop, err := Procedural{}.Propose(context.Background(), cur, r, RNG(seed.ID, rngSeed, 0, r, 0))
		if err != nil {
			t.Fatal(err)
		}
		lin.Round, lin.Parent = r, cur.ID
		next, err := Apply(cur, filepath.Join(t.TempDir(), filepath.Base(seedDir)), r, prop, lin)
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		lin.Steps = append(lin.Steps, prop.Steps[0].Kind)
		out = append(out, next)
		cur = next
	}
	return out
}

func TestSameSeedSameTasks(t *testing.T) {
	a := grow(t, "../../examples/seeds/greeting-file", 7, 3)
	b := grow(t, "../../examples/seeds/greeting-file", 7, 3)
	c := grow(t, "../../examples/seeds/greeting-file", 8, 3)
	for i := range a {
		if a[i].ID != b[i].ID {
			t.Fatalf("round %d: %s != %s for the same seeds", i+1, a[i].ID, b[i].ID)
		}
	}
	if a[2].ID == c[2].ID {
		t.Fatal("another RNG seed should give other tasks")
	}
}

func TestRoundsLengthenAndRealign(t *testing.T) {
	ts := grow(t, "../../examples/seeds/line-count", 1, 3)
	last := ts[2]
	sol, _ := os.ReadFile(filepath.Join(last.Dir, task.SolutionFile))
	if strings.Count(string(sol), "# step ") != 3 {
		t.Fatalf("solution has %d steps:\n%s", strings.Count(string(sol), "# step "), sol)
	}
	tests, _ := filepath.Glob(filepath.Join(last.Dir, "tests", "test_round_*.py"))
	if len(tests) != 3 {
		t.Fatalf("verifier files: %v", tests)
	}
	if !strings.Contains(last.Instruction, "Further requirements") || strings.Count(last.Instruction, "\n- ") != 3 {
		t.Fatalf("instruction not realigned:\n%s", last.Instruction)
	}
	if last.Config.Difficulty != "medium" {
		t.Errorf("three steps should make the task medium, got %q", last.Config.Difficulty)
	}
}

func TestEveryGeneratorMakesAValidStep(t *testing.T) {
	seed, _ := task.Load("../../examples/seeds/greeting-file")
	cats := map[string]bool{}
	for _, g := range Generators {
		s := g.Make(RNG("x", 1, 0, 1, 0), "r1a")
		s.Kind, s.Category = g.Name, g.Category
		cats[g.Category] = true
		if _, err := Apply(seed, filepath.Join(t.TempDir(), "t"), 1, Proposal{Steps: []Step{s}, By: "test"}, Lineage{Seed: seed.ID, Round: 1, Parent: seed.ID}); err != nil {
			t.Errorf("%s: %v", g.Name, err)
		}
	}
	if len(cats) < 7 {
		t.Errorf("generators cover %d categories, want 7: %v", len(cats), cats)
	}
}

func TestParseLLMStep(t *testing.T) {
	good := `Here you go: {"kind": "touch_marker", "category": "file-operations", "setup": "", "solution": "touch /app/r1x_marker",
	"tests": "import os\n\ndef test_marker():\n    assert os.path.exists('/app/r1x_marker')\n", "instruction": "Create the empty file /app/r1x_marker."}`
	s, err := ParseLLMStep(good)
	if err != nil || s.Kind != "touch_marker" || !strings.Contains(s.Tests, "def test_marker") {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []string{"no json", `{"kind": "x"}`, `{"kind": "a b", "solution": "x", "tests": "def test_a(): pass", "instruction": "i"}`,
		`{"kind": "k", "solution": "x", "tests": "print(1)", "instruction": "i"}`, `{"kind": "k", "solution": "x", "tests": "def test_a(): pass", "instruction": "i", "extra": 1}`} {
		if _, err := ParseLLMStep(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}
