package harness

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/t1flow/t1flow/inference"
)

// Harness names: what the model is told and how its replies are read.
const (
	// Terminus2 is Harbor's terminus-2 agent: one long user message from its
	// template, its parser's rules and feedback (docs/harness.md).
	Terminus2 = "terminus-2"
	// Short is t1flow's original 4-line system prompt and strict parser, for
	// tiny policies (the reference model) that cannot hold Terminus-2's prompt.
	Short = "short"
)

// Spec is what Terminus-2 renders, read from the installed harbor package by
// harness/harbor/spec.py (never copied into t1flow), so a Harbor upgrade is a
// pin change. Field names follow spec.py's JSON.
type Spec struct {
	HarborVersion     string `json:"harbor_version"`
	AgentSHA256       string `json:"agent_sha256"`
	Python            []int  `json:"python"`
	PromptTemplate    string `json:"prompt_template"`
	TimeoutTemplate   string `json:"timeout_template"`
	ConfirmBefore     string `json:"confirm_before"`
	ConfirmAfter      string `json:"confirm_after"`
	ErrorResponseType string `json:"error_response_type"`
	OutputLimitBytes  int    `json:"output_limit_bytes"`
	// OutputLimitMarker holds {max_bytes} and {omitted}.
	OutputLimitMarker  string  `json:"output_limit_marker"`
	MaxCommandSeconds  float64 `json:"max_command_seconds"`
	SummarizeThreshold int     `json:"proactive_summarization_threshold"`
	PaneWidth          int     `json:"pane_width"`
	PaneHeight         int     `json:"pane_height"`
	// The observation's first line, as TmuxSession writes it: the visible
	// screen, or the output new since the last observation.
	ScreenLabel    string `json:"screen_label"`
	NewOutputLabel string `json:"new_output_label"`
	// The context handoff (Terminus2._summarize): the summary request
	// ({instruction}), the fresh context's question request ({instruction},
	// {summary}, {screen}), the answer request ({questions}) and the prompt
	// the agent continues with ({answers}). harness/handoff.go.
	HandoffSummaryPrompt  string `json:"handoff_summary_prompt"`
	HandoffQuestionPrompt string `json:"handoff_question_prompt"`
	HandoffAnswerPrompt   string `json:"handoff_answer_prompt"`
	HandoffPrompt         string `json:"handoff_prompt"`
	// A reply cut by the output limit is answered with LengthError (the
	// limit unknown) or LengthErrorLimit ({limit}: "N tokens"), then the
	// cut reply's parser warnings after LengthWarningsLabel, in the same turn.
	LengthError         string `json:"length_error"`
	LengthErrorLimit    string `json:"length_error_limit"`
	LengthWarningsLabel string `json:"length_warnings_label"`
}

// Check names the field spec.py left empty.
func (s *Spec) Check() error {
	switch {
	case s.HarborVersion == "":
		return fmt.Errorf("harbor spec: harbor_version is empty")
	case !strings.Contains(s.PromptTemplate, "{instruction}") || !strings.Contains(s.PromptTemplate, "{terminal_state}"):
		return fmt.Errorf("harbor spec: prompt_template lacks {instruction} or {terminal_state} (harbor %s)", s.HarborVersion)
	case s.OutputLimitBytes <= 0 || !strings.Contains(s.OutputLimitMarker, "{omitted}"):
		return fmt.Errorf("harbor spec: output_limit_bytes %d / output_limit_marker %q", s.OutputLimitBytes, s.OutputLimitMarker)
	case s.ErrorResponseType == "" || s.ConfirmAfter == "" || s.ScreenLabel == "" || s.NewOutputLabel == "":
		return fmt.Errorf("harbor spec: error_response_type, confirm_after, screen_label or new_output_label is empty")
	case s.HandoffSummaryPrompt == "" || s.HandoffQuestionPrompt == "" || s.HandoffAnswerPrompt == "" || s.HandoffPrompt == "" || s.LengthError == "" || s.LengthErrorLimit == "":
		return fmt.Errorf("harbor spec: a handoff or length_error text is empty (a spec file from before spec.py read them: rerun scripts/ensure-harbor-env.sh)")
	case s.PaneWidth <= 0 || s.PaneHeight <= 0 || s.MaxCommandSeconds <= 0:
		return fmt.Errorf("harbor spec: pane %dx%d, max_command_seconds %v must be > 0", s.PaneWidth, s.PaneHeight, s.MaxCommandSeconds)
	}
	return nil
}

// Py313 is whether Harbor's JSON errors are CPython 3.13's.
func (s *Spec) Py313() bool {
	return len(s.Python) == 2 && (s.Python[0] > 3 || s.Python[0] == 3 && s.Python[1] >= 13)
}

// FirstPrompt is Terminus-2's initial user message: the template filled
// with the instruction and the terminal state (Harbor's "Current Terminal
// Screen:" text, already limited).
func (s *Spec) FirstPrompt(instruction, terminalState string) (string, error) {
	return pyFormat(s.PromptTemplate, map[string]string{"instruction": instruction, "terminal_state": terminalState})
}

// Parse reads a reply with Harbor's parser rules, durations capped as
// Harbor's loop caps them.
func (s *Spec) Parse(reply string) Parsed {
	p := ParseTerminus2(reply, s.Py313())
	for i := range p.Commands {
		p.Commands[i].Duration = min(p.Commands[i].Duration, s.MaxCommandSeconds)
	}
	return p
}

// Limit is _limit_output_length: text over the limit keeps its first and
// last halves (whole characters) around a marker.
func (s *Spec) Limit(out string) string {
	max := s.OutputLimitBytes
	if len(out) <= max {
		return out
	}
	half := max / 2
	first := strings.ToValidUTF8(out[:half], "")
	last := strings.ToValidUTF8(out[len(out)-half:], "")
	omitted := len(out) - len(first) - len(last)
	marker := strings.Replace(s.OutputLimitMarker, "{max_bytes}", strconv.Itoa(max), 1)
	marker = strings.Replace(marker, "{omitted}", strconv.Itoa(omitted), 1)
	return first + marker + last
}

// Next is what Harbor's loop answers a parsed reply with, given the
// terminal's incremental output after its commands ran (unused when the reply
// had an error: then nothing ran and nothing was read). pending is an
// earlier task_complete awaiting confirmation; done ends the episode.
func (s *Spec) Next(p Parsed, pending bool, terminal string) (obs string, confirm, done bool) {
	fb := p.Feedback()
	if p.Error != "" {
		return "Previous response had parsing errors:\n" + fb + "\n\nPlease fix these issues and provide a proper " + s.ErrorResponseType + ".", pending, false
	}
	out := s.Limit(terminal)
	switch {
	case p.TaskComplete && pending:
		return out, false, true
	case p.TaskComplete:
		return s.ConfirmBefore + out + s.ConfirmAfter, true, false
	case strings.Contains(fb, "WARNINGS:"):
		return "Previous response had warnings:\n" + fb + "\n\n" + s.Limit(out), false, false
	}
	return s.Limit(out), false, false
}

// pyFormat is str.format with named fields only ({{ and }} are braces).
func pyFormat(tmpl string, fields map[string]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch {
		case c == '{' && i+1 < len(tmpl) && tmpl[i+1] == '{', c == '}' && i+1 < len(tmpl) && tmpl[i+1] == '}':
			b.WriteByte(c)
			i++
		case c == '{':
			j := strings.IndexByte(tmpl[i:], '}')
			if j < 0 {
				return "", fmt.Errorf("template: unclosed { at byte %d", i)
			}
			name := tmpl[i+1 : i+j]
			v, ok := fields[name]
			if !ok {
				return "", fmt.Errorf("template: unknown field {%s} at byte %d (the harness fills %v)", name, i, keys(fields))
			}
			b.WriteString(v)
			i += j
		case c == '}':
			return "", fmt.Errorf("template: single } at byte %d", i)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// T2Action is a reply in Terminus-2's format: analysis and plan always
// present, in Harbor's field order.
type T2Action struct {
	Analysis     string `json:"analysis"`
	Plan         string `json:"plan"`
	Commands     []Keys `json:"commands"`
	TaskComplete bool   `json:"task_complete"`
}

// SolutionTurns renders a reference solution as Terminus-2 turns, for SFT:
// the first prompt a rollout sees (on a fresh shell's screen), a reply whose
// analysis and plan say what the solution does and whose commands are its
// steps, marking the task complete, the confirmation, and the confirming
// reply. Even-indexed parts are context, odd-indexed parts are learned.
func (s *Spec) SolutionTurns(t inference.ChatTemplate, instruction, solution, screen string) ([]Pieces, error) {
	keys := solutionKeys(solution)
	if len(keys) == 0 {
		return nil, fmt.Errorf("no steps to imitate")
	}
	first, err := s.FirstPrompt(instruction, s.Limit(s.ScreenLabel+screen))
	if err != nil {
		return nil, err
	}
	// The confirmation shows what a rollout's does once the commands ran:
	// the screen with each command typed at its prompt (what they print is
	// not known, as for the short harness's ScreenAfter), read as Harbor
	// reads new output against the first screen.
	shown := strings.TrimRight(screen, "\n")
	prompt := shown[strings.LastIndex(shown, "\n")+1:]
	after := shown[:len(shown)-len(prompt)] + ScreenAfter(prompt, keys)
	act := func(a T2Action) Pieces { return Pieces{plain(marshalJSON(a)), template(t.EndOfTurn)} }
	// The solution's "# analysis:" line, when it has one, as the short
	// harness states it (a family whose choice it names puts that choice
	// at the answer's first word); otherwise what a first turn sees.
	analysis := SolutionAnalysis(solution)
	if analysis == "" {
		analysis = "The terminal is at a fresh shell prompt and nothing has been done yet."
	}
	return []Pieces{
		UserFirstPieces(t, first),
		act(T2Action{
			Analysis: analysis,
			Plan:     fmt.Sprintf("Run the %d command(s) that complete the task, then mark it complete.", len(keys)),
			Commands: keys, TaskComplete: true,
		}),
		GluePieces(t, s.ConfirmBefore+s.Limit(s.IncrementalOutput(&screen, after, after))+s.ConfirmAfter, StitchEOT),
		act(T2Action{Analysis: "The commands have run.", Plan: "Confirm that the task is complete.", Commands: []Keys{}, TaskComplete: true}),
	}, nil
}
