package harness

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/audit"
)

// Piece is text the harness tokenizes on its own: the chat template's glue,
// whose special tokens are parsed, or Plain text from outside the harness
// (terminal output, the task, model text), encoded with special tokens split
// so that an observation holding the end-of-turn text (e.g. "<|im_end|>")
// never becomes a control token.
type Piece struct {
	Text  string
	Plain bool
}

// Pieces is a rendered stretch of context, in order.
type Pieces []Piece

// String is the text as a text-only harness would send it.
func (p Pieces) String() string {
	var b strings.Builder
	for _, x := range p {
		b.WriteString(x.Text)
	}
	return b.String()
}

func template(s string) Piece { return Piece{Text: s} }
func plain(s string) Piece    { return Piece{Text: s, Plain: true} }

// FirstPromptPieces is a policy's context at turn 0 in the model's chat
// template: the system prompt, the first observation, and the open
// assistant turn. Rollouts and SFT samples share it so that training sees
// exactly what sampling saw.
func FirstPromptPieces(t inference.ChatTemplate, obs string) Pieces {
	return Pieces{
		template(t.SystemPrefix + SystemPrompt + t.EndOfTurn + t.TurnSeparator + t.UserPrefix),
		plain(obs),
		template(t.EndOfTurn + t.TurnSeparator + t.AssistantPrefix),
	}
}

// UserFirstPieces opens a context with one user message and no system
// message: Terminus-2's first prompt (the template's whole text).
func UserFirstPieces(t inference.ChatTemplate, prompt string) Pieces {
	return Pieces{template(t.UserPrefix), plain(prompt), template(t.EndOfTurn + t.TurnSeparator + t.AssistantPrefix)}
}

// FirstPrompt is FirstPromptPieces as text.
func FirstPrompt(t inference.ChatTemplate, obs string) string {
	return FirstPromptPieces(t, obs).String()
}

// FirstMessages is the same opening for a chat agent.
func FirstMessages(obs string) []inference.ChatMessage {
	return []inference.ChatMessage{{Role: "system", Content: SystemPrompt}, {Role: "user", Content: obs}}
}

// GluePieces is the context between two assistant turns: the observation as
// a user turn, then the next assistant turn opened. Unless the sampler
// stopped on the end-of-turn token itself (StitchEOT), the glue first closes
// the assistant turn it left open.
func GluePieces(t inference.ChatTemplate, obs, stitch string) Pieces {
	open := t.TurnSeparator + t.UserPrefix
	if stitch != StitchEOT {
		open = t.EndOfTurn + open
	}
	return Pieces{template(open), plain(obs), template(t.EndOfTurn + t.TurnSeparator + t.AssistantPrefix)}
}

// ObservationGlue is GluePieces as text.
func ObservationGlue(t inference.ChatTemplate, obs, stitch string) string {
	return GluePieces(t, obs, stitch).String()
}

// FirstObservation is the task and the terminal as the episode starts.
func FirstObservation(instruction, terminal string) string {
	return "Task:\n" + strings.TrimSpace(instruction) + "\n\nCurrent terminal state:\n" + terminal
}

// NextObservation decides what the model sees after its answer ran: a
// correction for an invalid answer, a request to confirm a first
// task_complete (confirm), or the new output. A task_complete while a
// confirmation is pending ends the episode (done, no observation).
func NextObservation(action Action, perr error, pending bool, terminal string) (obs string, confirm, done bool) {
	switch {
	case perr != nil:
		return correctiveObservation(perr, terminal), false, false
	case action.TaskComplete && pending:
		return "", false, true
	case action.TaskComplete:
		return confirmObservation(terminal), true, false
	default:
		return outputObservation(terminal), false, false
	}
}

func correctiveObservation(err error, terminal string) string {
	return fmt.Sprintf("Your previous response was not a valid action (%v). Reply with exactly one JSON object with the fields analysis, plan, commands (a list of {\"keystrokes\", \"duration\"}) and task_complete.\n\nCurrent terminal output:\n%s", err, terminal)
}

func confirmObservation(terminal string) string {
	return "Are you sure you want to mark the task as complete? Your solution will be graded and you cannot make further changes. If so, reply again with \"task_complete\": true.\n\nCurrent terminal output:\n" + terminal
}

func outputObservation(terminal string) string {
	if strings.TrimSpace(terminal) == "" {
		return "New terminal output: (none)"
	}
	return "New terminal output:\n" + terminal
}

// SolutionTurns renders a reference solution as the harness's turns, for
// SFT: the first prompt a rollout sees (on a fresh shell), an assistant turn
// whose commands are the solution's steps and which marks the task complete,
// the confirmation glue, and the confirming turn. Even-indexed parts are
// context, odd-indexed parts are what the policy learns. The turns leave out
// analysis and plan (both optional): a fixed filler sentence taught nothing
// and doubled the tokens a small policy has to get right at temperature 1.
func SolutionTurns(t inference.ChatTemplate, instruction, solution string) ([]Pieces, error) {
	keys := solutionKeys(solution)
	if len(keys) == 0 {
		return nil, fmt.Errorf("no steps to imitate")
	}
	act := func(analysis string, cmds []Keys) Pieces {
		return Pieces{plain(MarshalAction(Action{Analysis: analysis, Commands: cmds, TaskComplete: true})), template(t.EndOfTurn)}
	}
	return []Pieces{
		FirstPromptPieces(t, FirstObservation(instruction, SFTPrompt)),
		act(SolutionAnalysis(solution), keys),
		GluePieces(t, confirmObservation(ScreenAfter(SFTPrompt, keys)), StitchEOT),
		act("", []Keys{}),
	}, nil
}

// SFTPrompt is the shell prompt an SFT sample's terminal shows: a fresh
// shell's in the sandbox, as a rollout's first observation has it.
const SFTPrompt = "root@sandbox:/app# "

// ScreenAfter is the terminal a shell at prompt shows once keys have run:
// each command echoed after the prompt, then the prompt again. What the
// commands print is not known without running them and is left out (so are
// a multi-line command's continuation prompts), so for one-line commands
// that print nothing it is the screen a rollout's confirmation shows. SFT's confirmation shows it rather than an empty terminal: a small
// policy that learned to confirm after an empty screen wrote noise after the
// real one (docs/learning.md).
func ScreenAfter(prompt string, keys []Keys) string {
	var b strings.Builder
	b.WriteString(prompt)
	for _, k := range keys {
		b.WriteString(k.Keystrokes)
		if !strings.HasSuffix(k.Keystrokes, "\n") {
			b.WriteString("\n")
		}
		b.WriteString(prompt)
	}
	return b.String()
}

// AnalysisMark starts a reference solution's comment line whose text the
// SFT reply states as its analysis, before its commands ("# analysis:
// hello"): a task family whose return is decided by what the analysis says
// puts that decision early in the answer (docs/learning.md, "The critic").
const AnalysisMark = "# analysis:"

// SolutionAnalysis is the text of the solution's AnalysisMark line, or "".
func SolutionAnalysis(solution string) string {
	for _, line := range strings.Split(solution, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), AnalysisMark); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// solutionKeys are a reference solution's steps as keystrokes.
func solutionKeys(solution string) []Keys {
	var keys []Keys
	for _, s := range audit.SplitSteps(solution) {
		keys = append(keys, Keys{Keystrokes: strings.TrimRight(s, "\n") + "\n", Duration: 1})
	}
	return keys
}

// MarshalAction writes an action as the model is asked to: JSON without
// HTML escaping, so "a && b > c" stays as typed instead of "\u0026\u0026",
// which a policy imitating it would learn to type into the shell.
func MarshalAction(a Action) string { return marshalJSON(a) }

func marshalJSON(a any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(a) // an Action always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
