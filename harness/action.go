// Package harness is the pure part of the Terminus-style harness: the model
// answers each turn with one JSON object (parsed here), its keystrokes go to
// a terminal in the sandbox (activities/ does that), and the new output comes
// back as the next observation (written here). It also holds what a
// token-in, token-out trajectory needs to stay exact: the chat-template
// prompt and glue, the stitch case of each turn boundary, the routed-experts
// check, and the drift audit. Nothing here touches Docker or Temporal.
package harness

import (
	"encoding/json"
	"fmt"
	"strings"
)

// SystemPrompt frames every episode. Versioned with the code.
const SystemPrompt = `You are an AI assistant solving a task in a Linux terminal. Each turn, reply with one JSON object and nothing else:
{"analysis": "what you see", "plan": "what you will do", "commands": [{"keystrokes": "ls -la\n", "duration": 0.5}], "task_complete": false}
keystrokes are typed into the terminal exactly (end a command with \n); duration is how many seconds to wait for its output (at most 60).
Set "task_complete": true when the task is done; you will be asked to confirm.`

// Action is one parsed model response.
type Action struct {
	Analysis     string `json:"analysis,omitempty"` // optional: a small policy's turn is shorter without it
	Plan         string `json:"plan,omitempty"`
	Commands     []Keys `json:"commands"`
	TaskComplete bool   `json:"task_complete"`
}

// Keys is one batch of keystrokes and how long to wait after them.
type Keys struct {
	Keystrokes string  `json:"keystrokes"`
	Duration   float64 `json:"duration"`
}

// MaxKeysDuration caps one command's wait.
const MaxKeysDuration = 60.0

// ParseAction reads the model's JSON, tolerating text around the object.
// Errors say what was wrong, for the corrective observation.
func ParseAction(text string) (Action, error) {
	var a Action
	i, j := strings.Index(text, "{"), strings.LastIndex(text, "}")
	if i < 0 || j <= i {
		return a, fmt.Errorf("no JSON object found")
	}
	dec := json.NewDecoder(strings.NewReader(text[i : j+1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return Action{}, fmt.Errorf("invalid JSON: %v", err)
	}
	for k, c := range a.Commands {
		if c.Duration < 0 {
			return Action{}, fmt.Errorf("commands[%d].duration %v must be >= 0", k, c.Duration)
		}
		if c.Duration > MaxKeysDuration {
			a.Commands[k].Duration = MaxKeysDuration
		}
	}
	if len(a.Commands) == 0 && !a.TaskComplete {
		return Action{}, fmt.Errorf("no commands and task_complete is false")
	}
	return a, nil
}

// ParseTurn reads the model's answer: the action, its keystrokes, and one
// line per command for the UI summary (empty when the answer is invalid).
func ParseTurn(text string) (Action, []Keys, []string, error) {
	action, err := ParseAction(text)
	if err != nil {
		return action, nil, nil, err
	}
	summary := make([]string, 0, len(action.Commands))
	for _, c := range action.Commands {
		summary = append(summary, strings.TrimSpace(c.Keystrokes))
	}
	return action, action.Commands, summary, nil
}
