// Package audit scores tasks on the eight dimensions of the T1 audit and
// finds the hard rejects that static reading can prove: hidden requirements,
// test leakage and shortcut solutions. Weak verifiers and the executable
// dimensions come from sandbox runs (workflows.AuditWorkflow), scored here.
package audit

// Hard reject reasons.
const (
	HiddenRequirements = "hidden_requirements"
	TestLeakage        = "test_leakage"
	ShortcutSolution   = "shortcut_solution"
	WeakVerifier       = "weak_verifier"
)

// Dimensions, their groups and weights (verifier 45%, solution 25%,
// instruction 20%, task value 10%).
var Dimensions = []struct {
	Name, Group string
	Weight      float64
}{
	{"verifier_strength", "verifier", 0.15},
	{"verifier_determinism", "verifier", 0.15},
	{"test_isolation", "verifier", 0.15},
	{"solution_correctness", "solution", 0.125},
	{"solution_integrity", "solution", 0.125},
	{"instruction_completeness", "instruction", 0.10},
	{"instruction_clarity", "instruction", 0.10},
	{"task_value", "task_value", 0.10},
}

// Config holds the thresholds.
type Config struct {
	KeepScore           float64 `json:"keep_score" toml:"keep_score"`                   // weighted score a kept task needs
	DuplicateJaccard    float64 `json:"duplicate_jaccard" toml:"duplicate_jaccard"`     // shingle similarity that makes a near duplicate
	ContaminationShare  float64 `json:"contamination_share" toml:"contamination_share"` // share of a task's shingles found in an eval task
	MinInstructionChars int     `json:"min_instruction_chars" toml:"min_instruction_chars"`
	MaxInstructionChars int     `json:"max_instruction_chars" toml:"max_instruction_chars"`
	Mutants             int     `json:"mutants" toml:"mutants"` // mutated solutions run per task
	// An optional judge model (OpenAI-compatible base URL, with or without
	// /v1) for the instruction dimensions and hidden requirements; the key is
	// read on the worker from the variable JudgeAPIKeyEnv names.
	JudgeEndpoint  string `json:"judge_endpoint,omitempty" toml:"judge_endpoint"`
	JudgeModel     string `json:"judge_model,omitempty" toml:"judge_model"`
	JudgeAPIKeyEnv string `json:"judge_api_key_env,omitempty" toml:"judge_api_key_env"`
}

// DefaultConfig are the thresholds used unless configured.
func DefaultConfig() Config {
	return Config{KeepScore: 0.7, DuplicateJaccard: 0.85, ContaminationShare: 0.5, MinInstructionChars: 40, MaxInstructionChars: 8000, Mutants: 1}
}

// Dimension is one scored dimension with its evidence.
type Dimension struct {
	Name     string   `json:"name"`
	Group    string   `json:"group"`
	Weight   float64  `json:"weight"`
	Score    float64  `json:"score"`
	Evidence []string `json:"evidence"`
}

// Static is what reading the task proves.
type Static struct {
	HiddenPaths  []string `json:"hidden_paths"`  // outputs the tests assert on, never named by the instruction
	Hidden       []string `json:"hidden"`        // the same, each with the assertion that needs it
	CheckedPaths []string `json:"checked_paths"` // outputs the tests assert on
	Inputs       []string `json:"inputs"`        // paths the tests only read
	Checks       []Check  `json:"-"`
	Outputs      []Output `json:"outputs"`
	Agents       Agents   `json:"agents"`
	Leaks        []string `json:"leaks"`     // test code visible to the agent
	Shortcuts    []string `json:"shortcuts"` // the solution reads tests or writes their literals
	Clarity      float64  `json:"clarity"`
	ClarityNotes []string `json:"clarity_notes"`
	Steps        []string `json:"steps"` // the solution's effectful steps
	Mutants      []Mutant `json:"mutants"`
}

// Mutant is a solution with one step removed.
type Mutant struct {
	Description string `json:"description"`
	Script      string `json:"script"`
}
