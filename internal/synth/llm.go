package synth

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"

	"github.com/t1flow/t1flow/internal/task"
)

// PromptVersion names the prompt file in prompts/; bump it with the prompt.
const PromptVersion = "extend_v1"

//go:embed prompts/extend_v1.txt
var extendPrompt string

// LLM proposes steps with a chat model over an OpenAI-compatible API. Its
// output is validated exactly like the procedural synthesizer's: Apply checks
// the shape, and the round is accepted only if the reference solution passes
// in a fresh sandbox and the untouched environment fails.
type LLM struct {
	Chat        Chat
	Model       string // names the synthesizer in lineage
	MaxTokens   int
	Temperature float64
}

// Chat is a hosted chat model answering one prompt. Activities hand in
// inference.ChatClient; synthesis stays a leaf that does no HTTP itself.
type Chat interface {
	Ask(ctx context.Context, prompt string, maxTokens int, temperature float64) (string, error)
}

func (l LLM) Name() string { return "llm:" + l.Model + ":" + PromptVersion }

// Propose asks the model for one step.
func (l LLM) Propose(ctx context.Context, t *task.Task, round int, rng *rand.Rand) (Proposal, error) {
	sol, err := os.ReadFile(filepath.Join(t.Dir, task.SolutionFile))
	if err != nil {
		return Proposal{}, err
	}
	tag := fmt.Sprintf("r%d%c", round, 'a'+rune(rng.Intn(26)))
	prompt := strings.NewReplacer("{round}", fmt.Sprint(round), "{tag}", tag,
		"{instruction}", t.Instruction, "{solution}", string(sol)).Replace(extendPrompt)
	maxTok := l.MaxTokens
	if maxTok == 0 {
		maxTok = 2048
	}
	text, err := l.Chat.Ask(ctx, prompt, maxTok, l.Temperature)
	if err != nil {
		return Proposal{}, err
	}
	s, err := ParseLLMStep(text)
	if err != nil {
		return Proposal{}, &InvalidOutputError{Err: err}
	}
	return Proposal{Steps: []Step{s}, By: l.Name()}, nil
}

// InvalidOutputError is a model answer that is not a usable step: the round
// rejects this variation and tries another.
type InvalidOutputError struct{ Err error }

func (e *InvalidOutputError) Error() string { return "synthesizer output rejected: " + e.Err.Error() }

// ParseLLMStep validates the model's JSON.
func ParseLLMStep(text string) (Step, error) {
	i, j := strings.Index(text, "{"), strings.LastIndex(text, "}")
	if i < 0 || j <= i {
		return Step{}, fmt.Errorf("no JSON object in the answer")
	}
	var raw struct {
		Kind, Category, Setup, Solution, Tests, Instruction string
	}
	dec := json.NewDecoder(strings.NewReader(text[i : j+1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return Step{}, fmt.Errorf("invalid JSON: %v", err)
	}
	switch {
	case raw.Kind == "" || strings.ContainsAny(raw.Kind, " /\n"):
		return Step{}, fmt.Errorf("kind %q must be a short name", raw.Kind)
	case strings.TrimSpace(raw.Solution) == "":
		return Step{}, fmt.Errorf("solution is empty")
	case !strings.Contains(raw.Tests, "def test_"):
		return Step{}, fmt.Errorf("tests has no test_ function")
	case strings.TrimSpace(raw.Instruction) == "":
		return Step{}, fmt.Errorf("instruction is empty")
	case strings.Contains(raw.Setup, "\n"):
		return Step{}, fmt.Errorf("setup must be one line")
	}
	return Step{Kind: raw.Kind, Category: raw.Category, Setup: raw.Setup, Solution: raw.Solution, Tests: raw.Tests, Instruction: raw.Instruction}, nil
}
