package audit

import (
	"fmt"
	"math"
	"sort"
)

// Run is one sandbox run's outcome, as the audit sees it.
type Run struct {
	Scored   bool   `json:"scored"`
	Resolved bool   `json:"resolved"`
	Passed   int    `json:"passed"`
	Total    int    `json:"total"`
	Outcome  string `json:"outcome"`
}

// Runs are the executable checks: the reference twice in fresh sandboxes,
// the null agent, and the mutated solutions.
type Runs struct {
	Oracle  []Run     `json:"oracle"`
	Nop     Run       `json:"nop"`
	Mutants []Mutated `json:"mutants"`
	// Agents that should not pass (nil: not run on this task), and the leak
	// seeker with what it wrote ("leak: FILE holds VALUE, written to PATH").
	Trivial  *Run     `json:"trivial,omitempty"`
	Shortcut *Run     `json:"shortcut,omitempty"`
	Leak     *Run     `json:"leak,omitempty"`
	LeakSeen []string `json:"leak_seen,omitempty"`
	// The optional judge model's verdict (nil: none configured).
	Model *ModelVerdict `json:"model,omitempty"`
}

// Mutated is a mutant's description and its run.
type Mutated struct {
	Description string `json:"description"`
	Run         Run    `json:"run"`
}

// Similarity places a task within its pool and against eval task sets.
type Similarity struct {
	DuplicateOf    string  `json:"duplicate_of,omitempty"`
	Duplicate      float64 `json:"duplicate"`
	ContaminatedBy string  `json:"contaminated_by,omitempty"`
	Contamination  float64 `json:"contamination"`
}

// Verdict is the audit's decision on one task, with its evidence.
type Verdict struct {
	Name        string             `json:"name"`
	TaskID      string             `json:"task_id"`
	Category    string             `json:"category,omitempty"`
	Kept        bool               `json:"kept"`
	Score       float64            `json:"score"`
	HardRejects []string           `json:"hard_rejects"`
	Flags       []string           `json:"flags,omitempty"` // soft blockers: near_duplicate, contaminated, infra
	Dimensions  map[string]float64 `json:"dimensions"`
	Details     []Dimension        `json:"details"`
	Steps       int                `json:"solution_steps"`
}

// TaskInfo is what Judge needs to know of the task itself.
type TaskInfo struct {
	Name, ID, Category, Difficulty string
}

// Judge scores the eight dimensions and decides.
func Judge(t TaskInfo, s Static, r Runs, sim Similarity, cfg Config) Verdict {
	j := newJudgement(t, s)
	j.executable(r)
	j.verifierStrength(r)
	j.static(s, r)
	j.model(r.Model)
	j.value(t, s, sim)
	if !allScored(r) {
		j.v.Flags = append(j.v.Flags, "infra")
	}
	return j.decide(cfg)
}

// judgement is a verdict being built: each dimension's score and evidence.
type judgement struct {
	v   Verdict
	dim map[string]*Dimension
}

func newJudgement(t TaskInfo, s Static) *judgement {
	j := &judgement{
		v:   Verdict{Name: t.Name, TaskID: t.ID, Category: t.Category, HardRejects: []string{}, Dimensions: map[string]float64{}, Steps: len(s.Steps)},
		dim: map[string]*Dimension{},
	}
	for _, d := range Dimensions {
		j.dim[d.Name] = &Dimension{Name: d.Name, Group: d.Group, Weight: d.Weight}
	}
	return j
}

// add scores a dimension (clamped to [0, 1]) with a line of evidence.
func (j *judgement) add(name string, score float64, format string, args ...any) {
	d := j.dim[name]
	d.Score = math.Max(0, math.Min(1, score))
	d.Evidence = append(d.Evidence, fmt.Sprintf(format, args...))
}

func (j *judgement) note(name, format string, args ...any) {
	j.dim[name].Evidence = append(j.dim[name].Evidence, fmt.Sprintf(format, args...))
}

func (j *judgement) reject(reason string) {
	if !contains(j.v.HardRejects, reason) {
		j.v.HardRejects = append(j.v.HardRejects, reason)
	}
}

// executable scores the reference solution's runs: correctness from the
// first, determinism from the first two.
func (j *judgement) executable(r Runs) {
	if len(r.Oracle) > 0 && r.Oracle[0].Scored {
		o := r.Oracle[0]
		j.add("solution_correctness", frac(o.Passed, o.Total), "reference solution: %d/%d assertions in a fresh sandbox (%s)", o.Passed, o.Total, o.Outcome)
	} else {
		j.add("solution_correctness", 0, "reference solution was not scored (%s)", firstOutcome(r.Oracle))
	}
	if len(r.Oracle) >= 2 && r.Oracle[0].Scored && r.Oracle[1].Scored {
		a, b := r.Oracle[0], r.Oracle[1]
		same := a.Passed == b.Passed && a.Total == b.Total
		score := 0.0
		if same && a.Resolved {
			score = 1
		} else if same {
			score = 0.5
		}
		j.add("verifier_determinism", score, "reference runs in two fresh sandboxes: %d/%d and %d/%d", a.Passed, a.Total, b.Passed, b.Total)
	} else {
		j.add("verifier_determinism", 0, "the reference did not get two scored runs")
	}
}

// verifierStrength is decided by the agents that should not pass: the null
// agent, constant outputs, and hard-coded expected literals. Any of them
// resolving the task is a weak verifier. A solution step whose removal still
// passes is a note (an unneeded step), never a reject.
func (j *judgement) verifierStrength(r Runs) {
	failing, n := 0.0, 0
	should := func(name string, run *Run) {
		if run == nil {
			return
		}
		switch {
		case !run.Scored:
			j.note("verifier_strength", "%s was not scored (%s)", name, run.Outcome)
		case run.Resolved:
			n++
			j.reject(WeakVerifier)
			j.note("verifier_strength", "%s passes every assertion (%d/%d)", name, run.Passed, run.Total)
		default:
			n++
			failing += 1 - frac(run.Passed, run.Total)
			j.note("verifier_strength", "%s fails (%d/%d assertions pass)", name, run.Passed, run.Total)
		}
	}
	nop := r.Nop
	should("the null agent", &nop)
	should("an agent writing constant outputs", r.Trivial)
	should("an agent hard-coding the expected literals into the programs the tests run", r.Shortcut)
	killed := 0
	for _, m := range r.Mutants {
		switch {
		case !m.Run.Scored:
			j.note("verifier_strength", "mutant %q was not scored (%s)", m.Description, m.Run.Outcome)
		case m.Run.Resolved:
			j.note("verifier_strength", "unneeded step: the solution %s still passes every assertion", m.Description)
		default:
			killed++
			j.note("verifier_strength", "mutant %q fails (%d/%d)", m.Description, m.Run.Passed, m.Run.Total)
		}
	}
	strength := 0.8
	if n > 0 {
		strength = 0.8 * failing / float64(n)
	}
	if len(r.Mutants) > 0 {
		strength += 0.2 * frac(killed, len(r.Mutants))
	} else {
		strength += 0.2
	}
	if contains(j.v.HardRejects, WeakVerifier) {
		strength = 0
	}
	j.dim["verifier_strength"].Score = strength
}

// leakage: the leak seeker resolved the task with values it found in the
// image; a run that wrote nothing says nothing.
func leakage(r Runs) []string {
	if r.Leak == nil || !r.Leak.Scored || !r.Leak.Resolved || len(r.LeakSeen) == 0 {
		return nil
	}
	out := []string{"the leak seeker resolves the task by copying values it found in the image:"}
	return append(out, r.LeakSeen...)
}

// static scores what reading the task proved.
func (j *judgement) static(s Static, r Runs) {
	j.clean("test_isolation", TestLeakage, append(append([]string{}, s.Leaks...), leakage(r)...), "leak finding(s)", "no test code in the environment or instruction; no value found in the image resolves the task")
	j.clean("solution_integrity", ShortcutSolution, s.Shortcuts, "shortcut(s)", "the solution computes its outputs and never reads the tests")
	if len(s.HiddenPaths) > 0 {
		j.reject(HiddenRequirements)
		j.add("instruction_completeness", 1-frac(len(s.HiddenPaths), len(s.CheckedPaths)), "the tests assert on outputs the instruction never names: %v", s.HiddenPaths)
		for _, h := range s.Hidden {
			j.note("instruction_completeness", "%s", h)
		}
	} else {
		j.add("instruction_completeness", 1, "the instruction names all %d outputs the tests assert on", len(s.CheckedPaths))
	}
	if len(s.Inputs) > 0 {
		j.note("instruction_completeness", "inputs the tests read, not requirements: %v", s.Inputs)
	}
	j.add("instruction_clarity", s.Clarity, "%v", s.ClarityNotes)
}

// clean scores a dimension that any finding fails outright: 1 with the
// reassurance when nothing was found, else 0, a hard reject, and every
// finding as evidence.
func (j *judgement) clean(name, reason string, found []string, noun, none string) {
	if len(found) == 0 {
		j.add(name, 1, "%s", none)
		return
	}
	j.reject(reason)
	j.add(name, 0, "%d %s", len(found), noun)
	for _, f := range found {
		j.note(name, "%s", f)
	}
}

// value: longer and harder tasks are worth more; a near duplicate or a task
// that overlaps an eval set is worth nothing.
func (j *judgement) value(t TaskInfo, s Static, sim Similarity) {
	value := 0.4*math.Min(float64(len(s.Steps))/6, 1) + 0.4*difficultyValue(t.Difficulty) + 0.2
	j.add("task_value", value, "%d solution steps, difficulty %q", len(s.Steps), t.Difficulty)
	if sim.DuplicateOf != "" {
		j.v.Flags = append(j.v.Flags, "near_duplicate")
		j.dim["task_value"].Score = 0
		j.note("task_value", "near duplicate of %s (similarity %.2f)", sim.DuplicateOf, sim.Duplicate)
	}
	if sim.ContaminatedBy != "" {
		j.v.Flags = append(j.v.Flags, "contaminated")
		j.dim["task_value"].Score = 0
		j.note("task_value", "overlaps eval task %s (%.0f%% of its n-grams)", sim.ContaminatedBy, 100*sim.Contamination)
	}
}

// decide weighs the dimensions; a kept task has no hard reject, no flag and
// at least the keep score.
func (j *judgement) decide(cfg Config) Verdict {
	v := j.v
	for _, d := range Dimensions {
		x := j.dim[d.Name]
		v.Score += d.Weight * x.Score
		v.Dimensions[d.Name] = round3(x.Score)
		v.Details = append(v.Details, *x)
	}
	v.Score = round3(v.Score)
	sort.Strings(v.HardRejects)
	v.Kept = len(v.HardRejects) == 0 && len(v.Flags) == 0 && v.Score >= cfg.KeepScore
	return v
}

// allScored: a reference or null-agent run that was not scored is an infra
// problem, not evidence about the task.
func allScored(r Runs) bool {
	for _, o := range append(append([]Run{}, r.Oracle...), r.Nop) {
		if !o.Scored {
			return false
		}
	}
	return true
}

func frac(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func difficultyValue(d string) float64 {
	switch d {
	case "hard":
		return 1
	case "medium":
		return 0.75
	case "easy":
		return 0.5
	}
	return 0.4
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func firstOutcome(rs []Run) string {
	if len(rs) == 0 {
		return "no run"
	}
	return rs[0].Outcome
}
