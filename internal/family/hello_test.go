package family

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/task"
)

// Held-out variants share no instruction with SFT or training ones, and
// only they use the held-out sentence templates; SFT variants ask for each
// word half the time, training and held-out ones for Word.
func TestHelloHeldOutNeverTrained(t *testing.T) {
	sft, tr, ho := Hello{SFT: 100, Train: 200, HeldOut: 50, Seed: 1}.Variants()
	words := map[string]int{}
	for _, v := range sft {
		words[v.Word]++
		if !strings.HasPrefix(v.Instruction, "Word: "+v.Word+". ") || !strings.Contains(v.Instruction[12:], v.Word) {
			t.Fatalf("SFT variant %q does not name its word %q", v.Instruction, v.Word)
		}
	}
	if words[Word] != 50 || words[Sibling] != 50 {
		t.Fatalf("SFT words: %v, want 50 of each", words)
	}
	for _, v := range append(tr, ho...) {
		if v.Word != Word || !strings.HasPrefix(v.Instruction, "Word: "+Word+". ") {
			t.Fatalf("%q asks for %q, not %q", v.Instruction, v.Word, Word)
		}
	}
	seen := map[string]bool{}
	for _, v := range append(sft, tr...) {
		if seen[v.Instruction] {
			t.Fatalf("two training variants read %q: one task, counted twice", v.Instruction)
		}
		seen[v.Instruction] = true
		for i := range HeldOutTemplates {
			if strings.Contains(v.Instruction, heldOutCore(i)) {
				t.Fatalf("training variant %q uses held-out template %d", v.Instruction, i)
			}
		}
	}
	for _, v := range append(append(sft, tr...), ho...) {
		if len(v.Instruction) != InstructionLen {
			t.Fatalf("%q has %d characters, not %d: the answer would move in the prompt", v.Instruction, len(v.Instruction), InstructionLen)
		}
	}
	for _, v := range ho {
		if seen[v.Instruction] {
			t.Fatalf("held-out variant %q is also a training variant", v.Instruction)
		}
	}
	_, again, _ := Hello{SFT: 100, Train: 200, HeldOut: 50, Seed: 1}.Variants()
	if again[7] != tr[7] {
		t.Fatal("the same seed must give the same variants")
	}
}

func heldOutCore(i int) string {
	return strings.SplitN(helloTemplates[i], "%", 2)[0]
}

// Every task loads as a Harbor task, and its verifier scores letter by
// letter: the reference answer passes all assertions, a near miss most,
// nothing none.
func TestHelloTasksAndVerifier(t *testing.T) {
	dir := t.TempDir()
	sft, tr, ho, err := Hello{SFT: 2, Train: 3, HeldOut: 2, Seed: 1}.Write(dir)
	if err != nil || len(sft) != 2 || len(tr) != 3 || len(ho) != 2 {
		t.Fatalf("%v %v %v %v", sft, tr, ho, err)
	}
	for _, d := range append(append(sft, tr...), ho...) {
		if _, err := task.Load(d); err != nil {
			t.Fatal(err)
		}
	}
	script, err := os.ReadFile(filepath.Join(tr[0], "tests/test.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for content, want := range map[string]int{"hello\n": HelloAssertions, "hellx\n": HelloAssertions - 2, "": 0} {
		root := t.TempDir()
		if content != "" {
			os.WriteFile(root+"/o", []byte(content), 0o644)
		}
		passed, total := runVerifier(t, string(script), root)
		if total != HelloAssertions || passed != want {
			t.Errorf("%q: %d of %d assertions passed, want %d of %d", content, passed, total, want, HelloAssertions)
		}
	}
}

// StateWord writes the word as the solution's analysis line (each task's
// own word, SFT's world included); without it there is no such line.
func TestHelloStateWordWritesTheAnalysisLine(t *testing.T) {
	for _, state := range []bool{false, true} {
		sft, _, _, err := Hello{SFT: 2, Train: 1, HeldOut: 1, Seed: 1, StateWord: state}.Write(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range sft {
			b, err := os.ReadFile(filepath.Join(d, "solution/solve.sh"))
			if err != nil {
				t.Fatal(err)
			}
			word := []string{Word, Sibling}[i]
			want := "#!/bin/bash\necho " + word + " >/app/o\n"
			if state {
				want = "#!/bin/bash\n# analysis: " + word + "\necho " + word + " >/app/o\n"
			}
			if string(b) != want {
				t.Errorf("StateWord %v: solve.sh %q, want %q", state, b, want)
			}
		}
	}
}

// Check adds a read-back of the file after the write, as its own step (so
// the SFT answer has two commands); without it the solution is the write
// alone. Every set's solutions get it, each with its own word.
func TestHelloCheckReadsTheFileBack(t *testing.T) {
	for _, check := range []bool{false, true} {
		for i, b := range solutions(t)(Hello{SFT: 2, Train: 1, HeldOut: 1, Seed: 1, Check: check}.Write(t.TempDir())) {
			word := []string{Word, Sibling, Word, Word}[i]
			want := "#!/bin/bash\necho " + word + " >/app/o\n"
			if check {
				want += "cat /app/o\n"
			}
			if b != want {
				t.Errorf("Check %v: solution %d %q, want %q", check, i, b, want)
			}
			if steps := audit.SplitSteps(b); len(steps) != map[bool]int{false: 1, true: 2}[check] {
				t.Errorf("Check %v: %d steps %q", check, len(steps), steps)
			}
		}
	}
}

// runVerifier runs a write-hello verifier script with its paths under root
// (root/o for /app/o, its CTRF at root/logs/ctrf.json) and counts its
// assertions.
func runVerifier(t *testing.T, script, root string) (passed, total int) {
	t.Helper()
	script = strings.NewReplacer(OutFile, root+"/o", "/logs/verifier", root+"/logs").Replace(script)
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("test.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(root + "/logs/ctrf.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results struct{ Tests []struct{ Status string } }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("ctrf.json: %v\n%s", err, b)
	}
	for _, x := range doc.Results.Tests {
		if x.Status == "passed" {
			passed++
		}
	}
	return passed, len(doc.Results.Tests)
}
