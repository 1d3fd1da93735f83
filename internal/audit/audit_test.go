package audit

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/task"
)

func analyze(t *testing.T, dir string) Static {
	t.Helper()
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Analyze(tk, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const planted = "../../workflows/testdata/audit/"

func TestStaticChecksCatchPlantedTasks(t *testing.T) {
	if s := analyze(t, planted+"hidden-requirement"); len(s.HiddenPaths) != 1 || s.HiddenPaths[0] != "/app/reports/count.txt" {
		t.Errorf("hidden requirement: %+v", s.HiddenPaths)
	}
	if s := analyze(t, planted+"test-leakage"); len(s.Leaks) == 0 || !strings.Contains(s.Leaks[0], "grader.py") {
		t.Errorf("test leakage: %v", s.Leaks)
	}
	if s := analyze(t, planted+"shortcut-solution"); len(s.Shortcuts) == 0 || !strings.Contains(s.Shortcuts[0], `"132"`) {
		t.Errorf("shortcut: %v", s.Shortcuts)
	}
	good := analyze(t, planted+"good-sum")
	if len(good.HiddenPaths)+len(good.Leaks)+len(good.Shortcuts) != 0 || len(good.Steps) != 2 || len(good.Mutants) != 1 {
		t.Errorf("good task: %+v", good)
	}
}

func TestNoFalseRejectsOnShippedTasks(t *testing.T) {
	dirs, _ := filepath.Glob("../../examples/tasks/*")
	seeds, _ := filepath.Glob("../../examples/seeds/*")
	for _, d := range append(dirs, seeds...) {
		s := analyze(t, d)
		if len(s.HiddenPaths)+len(s.Leaks)+len(s.Shortcuts) != 0 {
			t.Errorf("%s: hidden %v, leaks %v, shortcuts %v", filepath.Base(d), s.HiddenPaths, s.Leaks, s.Shortcuts)
		}
		if len(s.Steps) == 0 || s.Clarity < 0.7 {
			t.Errorf("%s: %d steps, clarity %.2f %v", filepath.Base(d), len(s.Steps), s.Clarity, s.ClarityNotes)
		}
	}
}

func TestSplitStepsAndMutants(t *testing.T) {
	script := "#!/bin/bash\nset -euo pipefail\ncd /app\nmkdir -p out\nfor f in *.txt; do\n  cp \"$f\" out/\ndone\n" +
		"cat > out/run.sh <<'END'\necho hi\nEND\nchmod +x out/run.sh && \\\n  echo ok\n"
	steps := SplitSteps(script)
	if len(steps) != 4 || !strings.HasPrefix(steps[1], "for f") || !strings.Contains(steps[2], "echo hi") || !strings.Contains(steps[3], "echo ok") {
		t.Fatalf("steps: %q", steps)
	}
	ms := Mutants(script, 3)
	if len(ms) != 3 || !strings.Contains(ms[0].Description, "step 4 of 4") || strings.Contains(ms[0].Script, "chmod") || !strings.Contains(ms[0].Script, "mkdir -p out") {
		t.Fatalf("mutants: %+v", ms)
	}
}

func TestJudgeWeighsAndRejects(t *testing.T) {
	s := analyze(t, planted+"good-sum")
	ok := Run{Scored: true, Resolved: true, Passed: 2, Total: 2, Outcome: "resolved"}
	fail := Run{Scored: true, Passed: 1, Total: 2, Outcome: "unresolved"}
	runs := Runs{Oracle: []Run{ok, ok}, Nop: Run{Scored: true, Total: 2, Outcome: "unresolved"},
		Mutants: []Mutated{{"a", fail}, {"b", fail}}}
	info := TaskInfo{Name: "good-sum", Difficulty: "medium"}
	v := Judge(info, s, runs, Similarity{}, DefaultConfig())
	if !v.Kept || len(v.HardRejects) != 0 || v.Score < 0.9 || len(v.Dimensions) != 8 {
		t.Fatalf("good task: %+v", v)
	}
	weights := 0.0
	for _, d := range Dimensions {
		weights += d.Weight
	}
	if weights < 0.9999 || weights > 1.0001 {
		t.Fatalf("weights add up to %v", weights)
	}
	// A dropped step that still passes is an unneeded step: a note, kept.
	runs.Mutants[1].Run = ok
	v = Judge(info, s, runs, Similarity{}, DefaultConfig())
	if !v.Kept || len(v.HardRejects) != 0 || !strings.Contains(strings.Join(v.Details[0].Evidence, "\n"), "unneeded step") {
		t.Fatalf("a surviving mutant is a note, not a reject: %+v %v", v.HardRejects, v.Details[0].Evidence)
	}
	// Constant outputs or hard-coded literals that pass: a weak verifier.
	for _, agent := range []string{"trivial", "shortcut"} {
		r := runs
		if agent == "trivial" {
			r.Trivial = &ok
		} else {
			r.Shortcut = &ok
		}
		v = Judge(info, s, r, Similarity{}, DefaultConfig())
		if v.Kept || strings.Join(v.HardRejects, ",") != WeakVerifier {
			t.Fatalf("%s agent passing must be a weak verifier: %+v", agent, v.HardRejects)
		}
	}
	// The leak seeker resolving with a value it found: leakage; resolving
	// without having written anything says nothing.
	r := runs
	r.Leak = &ok
	if v = Judge(info, s, r, Similarity{}, DefaultConfig()); !v.Kept {
		t.Fatalf("a leak run that found nothing is no leak: %+v", v.HardRejects)
	}
	r.LeakSeen = []string{`/app/.cache/key holds "17", written to /app/answer.txt`}
	if v = Judge(info, s, r, Similarity{}, DefaultConfig()); strings.Join(v.HardRejects, ",") != TestLeakage {
		t.Fatalf("leak seeker resolving: %+v", v.HardRejects)
	}
	v = Judge(info, s, Runs{Oracle: []Run{ok, ok}, Nop: ok}, Similarity{ContaminatedBy: "tb2/x", Contamination: 0.8}, DefaultConfig())
	if v.Kept || !contains(v.HardRejects, WeakVerifier) || !contains(v.Flags, "contaminated") {
		t.Fatalf("nop passes + contaminated: %+v", v)
	}
}

func TestShinglesFindNearDuplicates(t *testing.T) {
	a := Shingles("Write the sum of the numbers in /app/numbers.txt to /app/sum.txt and the max to /app/max.txt", 4)
	b := Shingles("Write the sum of the numbers in /app/numbers.txt to /app/sum.txt and the max to /app/top.txt", 4)
	c := Shingles("Create a git repository with one commit that adds NOTES.md", 4)
	if Jaccard(a, b) < 0.5 || Jaccard(a, c) > 0.1 || Containment(a, a) != 1 {
		t.Fatalf("jaccard %v %v", Jaccard(a, b), Jaccard(a, c))
	}
}

func TestModelVerdictSitsBesideTheExecutableChecks(t *testing.T) {
	s := analyze(t, planted+"good-sum")
	ok := Run{Scored: true, Resolved: true, Passed: 2, Total: 2, Outcome: "resolved"}
	runs := Runs{Oracle: []Run{ok, ok}, Nop: Run{Scored: true, Total: 2}}
	info := TaskInfo{Name: "good-sum", Difficulty: "medium"}
	base := Judge(info, s, runs, Similarity{}, DefaultConfig())
	runs.Model = &ModelVerdict{Model: "m", Clarity: 0.5, Completeness: 1, Quote: "Write the sum"}
	v := Judge(info, s, runs, Similarity{}, DefaultConfig())
	if !v.Kept || v.Dimensions["instruction_clarity"] != (base.Dimensions["instruction_clarity"]+0.5)/2 {
		t.Fatalf("clarity is the mean of heuristic and model: %v vs %v", v.Dimensions, base.Dimensions)
	}
	runs.Model.Hidden = []Finding{{Assertion: "assert x", Requirement: "y"}}
	if v = Judge(info, s, runs, Similarity{}, DefaultConfig()); strings.Join(v.HardRejects, ",") != HiddenRequirements {
		t.Fatalf("a quoted hidden requirement is a hard reject: %v", v.HardRejects)
	}
	runs.Model = &ModelVerdict{Model: "m", Error: "no JSON object"}
	if v = Judge(info, s, runs, Similarity{}, DefaultConfig()); !v.Kept || v.Dimensions["instruction_clarity"] != base.Dimensions["instruction_clarity"] {
		t.Fatalf("an unusable answer leaves the executable checks alone: %+v", v)
	}
}
