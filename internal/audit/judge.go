package audit

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// ModelVerdict is an optional judge model's reading of the instruction and
// the tests (an OpenAI-compatible endpoint, as the paper's audit used). Every
// finding quotes its evidence; quotes that are not in the task are dropped.
type ModelVerdict struct {
	Model        string    `json:"model"`
	Clarity      float64   `json:"clarity"`      // 0–1
	Completeness float64   `json:"completeness"` // 0–1
	Quote        string    `json:"quote,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Hidden       []Finding `json:"hidden,omitempty"` // requirements the tests assert that the instruction never states
	Dropped      int       `json:"dropped,omitempty"`
	Error        string    `json:"error,omitempty"` // the answer was unusable: the executable checks decide alone
}

// Finding is one hidden requirement with the assertion that needs it.
type Finding struct {
	Assertion   string `json:"assertion"` // quoted from the tests
	Requirement string `json:"requirement"`
}

// JudgePromptVersion names the prompt below; change it with the prompt.
const JudgePromptVersion = "audit_judge_v1"

// JudgePrompt asks for the instruction dimensions and hidden requirements,
// with quotes, as one JSON object.
func JudgePrompt(instr string, tests map[string]string) string {
	var b strings.Builder
	b.WriteString("You audit a terminal task for an agent benchmark. The agent sees only the INSTRUCTION; the TESTS run after it finishes.\n")
	b.WriteString("A hidden requirement is something the tests assert about the agent's outputs (files it writes, state it changes, output it prints) that the instruction does not ask for. Inputs the tests merely read are not requirements.\n")
	b.WriteString("Answer with one JSON object and nothing else:\n")
	b.WriteString(`{"clarity": 0..1, "completeness": 0..1, "quote": "<a phrase copied from the instruction supporting your clarity score>", "reason": "<one sentence>", "hidden": [{"assertion": "<a line copied exactly from the tests>", "requirement": "<what it demands that the instruction never states>"}]}` + "\n\n")
	b.WriteString("INSTRUCTION:\n" + instr + "\n")
	names := make([]string, 0, len(tests))
	for n := range tests {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\nTESTS (%s):\n%s\n", n, tests[n])
	}
	return b.String()
}

// ParseModelVerdict reads the judge's answer: the first JSON object in it,
// scores clamped to [0, 1], and only findings whose assertion is quoted from
// the tests (and a clarity quote found in the instruction) kept.
func ParseModelVerdict(reply, instr string, tests map[string]string) (ModelVerdict, error) {
	var v ModelVerdict
	i, j := strings.Index(reply, "{"), strings.LastIndex(reply, "}")
	if i < 0 || j < i {
		return v, fmt.Errorf("no JSON object in the answer: %q", clip(reply, 200))
	}
	if err := json.Unmarshal([]byte(reply[i:j+1]), &v); err != nil {
		return v, fmt.Errorf("the answer's JSON: %v", err)
	}
	v.Clarity, v.Completeness = clamp01(v.Clarity), clamp01(v.Completeness)
	if v.Quote != "" && !strings.Contains(norm(instr), norm(v.Quote)) {
		v.Quote, v.Dropped = "", v.Dropped+1
	}
	all := norm(strings.Join(mapValues(tests), "\n"))
	kept := v.Hidden[:0]
	for _, f := range v.Hidden {
		if a := norm(f.Assertion); a != "" && strings.Contains(all, a) {
			kept = append(kept, f)
		} else {
			v.Dropped++
		}
	}
	v.Hidden = kept
	return v, nil
}

func norm(s string) string { return strings.Join(strings.Fields(s), " ") }

func clamp01(x float64) float64 { return max(0, min(1, x)) }

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// model adds the judge's verdict beside the executable checks: the
// instruction dimensions average the two, and a hidden requirement it
// quotes from the tests is a hard reject.
func (j *judgement) model(m *ModelVerdict) {
	if m == nil {
		return
	}
	if m.Error != "" {
		j.note("instruction_clarity", "judge model %s gave no usable verdict (%s); the executable checks decide alone", m.Model, m.Error)
		return
	}
	c := j.dim["instruction_clarity"]
	c.Score = (c.Score + m.Clarity) / 2
	j.note("instruction_clarity", "judge model %s: clarity %.2f, %q (%s)", m.Model, m.Clarity, m.Quote, m.Reason)
	d := j.dim["instruction_completeness"]
	d.Score = min(d.Score, (d.Score+m.Completeness)/2)
	for _, f := range m.Hidden {
		j.reject(HiddenRequirements)
		d.Score = min(d.Score, 0.5)
		j.note("instruction_completeness", "judge model %s: the tests assert %q, which needs %s, never stated by the instruction", m.Model, f.Assertion, f.Requirement)
	}
	if m.Dropped > 0 {
		j.note("instruction_completeness", "judge model %s: %d finding(s) dropped, their quotes are not in the task", m.Model, m.Dropped)
	}
}
