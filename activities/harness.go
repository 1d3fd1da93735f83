package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/text"
	"github.com/t1flow/t1flow/sandbox"
)

// The Terminus-style harness: the model answers each turn with one JSON
// object, keystrokes go to a tmux session in the sandbox, and the new
// terminal output comes back as the next observation.

// SystemPrompt frames every episode. Versioned with the code.
const SystemPrompt = `You are an AI assistant solving a task in a Linux terminal. Each turn, reply with one JSON object and nothing else:
{"analysis": "what you see", "plan": "what you will do", "commands": [{"keystrokes": "ls -la\n", "duration": 0.5}], "task_complete": false}
keystrokes are typed into the terminal exactly (end a command with \n); duration is how many seconds to wait for its output (at most 60).
Set "task_complete": true when the task is done; you will be asked to confirm.`

// Action is one parsed model response.
type Action struct {
	Analysis     string `json:"analysis"`
	Plan         string `json:"plan"`
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

// Observations the harness writes back to the model.
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

func firstObservation(instruction, terminal string) string {
	return "Task:\n" + strings.TrimSpace(instruction) + "\n\nCurrent terminal state:\n" + terminal
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]|\r`)

// cleanTerminal strips escape sequences and caps the text, head and tail kept.
func cleanTerminal(s string, head, tail int) string {
	s = ansi.ReplaceAllString(s, "")
	c := sandbox.NewCappedBuffer(head, tail)
	c.Write([]byte(s))
	return c.String()
}

// tmux session, and the file its pane output is piped into.
const (
	tmuxSession = "t1flow"
	paneLog     = "/tmp/.t1flow-pane.log"
)

// tmuxSetup starts the session and pipes its output to paneLog.
func tmuxSetup() string {
	return fmt.Sprintf(`command -v tmux >/dev/null || { echo "tmux is not installed in the sandbox image" >&2; exit 3; }
tmux has-session -t %[1]s 2>/dev/null || { tmux new-session -d -s %[1]s -x 160 -y 40 && : > %[2]s && tmux pipe-pane -t %[1]s -o 'cat >> %[2]s'; }
sleep 0.3`, tmuxSession, paneLog)
}

// tmuxKeys types each command's keystrokes (newlines as Enter) and waits.
func tmuxKeys(cmds []Keys, budget time.Duration) string {
	var b strings.Builder
	left := budget.Seconds()
	for _, c := range cmds {
		parts := strings.Split(c.Keystrokes, "\n")
		for i, p := range parts {
			if p != "" {
				fmt.Fprintf(&b, "tmux send-keys -t %s -l -- %s\n", tmuxSession, text.ShellQuote(p))
			}
			if i < len(parts)-1 {
				fmt.Fprintf(&b, "tmux send-keys -t %s Enter\n", tmuxSession)
			}
		}
		d := min(c.Duration, left)
		if d > 0 {
			fmt.Fprintf(&b, "sleep %s\n", strconv.FormatFloat(d, 'f', 3, 64))
			left -= d
		}
	}
	return b.String()
}

// readPane prints the pane log's size, a marker line, then its bytes from offset.
func readPane(offset int64) string {
	return fmt.Sprintf("sz=$(stat -c %%s %[1]s 2>/dev/null || echo 0); echo \"$sz\"; echo '---t1flow---'; tail -c +%[2]d %[1]s 2>/dev/null | head -c $((sz - %[3]d))", paneLog, offset+1, offset)
}

// splitPane parses readPane's output.
func splitPane(out string) (int64, string, error) {
	head, body, ok := strings.Cut(out, "\n---t1flow---\n")
	if !ok {
		return 0, "", fmt.Errorf("pane read: marker missing in %q", text.Truncate(out, 200))
	}
	lines := strings.Split(strings.TrimSpace(head), "\n")
	n, err := strconv.ParseInt(strings.TrimSpace(lines[len(lines)-1]), 10, 64)
	return n, body, err
}

// terminalStep runs keystrokes (if any) and returns the pane output since offset.
func (a *Activities) terminalStep(ctx context.Context, id string, setup bool, cmds []Keys, offset int64, budget time.Duration) (string, int64, error) {
	var script strings.Builder
	if setup {
		script.WriteString(tmuxSetup() + "\n")
	}
	script.WriteString(tmuxKeys(cmds, budget))
	script.WriteString(readPane(offset))
	// The raw output is capped later; allow enough here to find the marker.
	res, err := a.Docker.Exec(ctx, id, script.String(), sandbox.ExecOptions{
		Timeout: budget + 30*time.Second, User: "root", HeadCap: 1 << 10, TailCap: 64 << 10,
		Progress: func() { heartbeat.Record(ctx, "terminal") },
	})
	if err != nil {
		return "", offset, err
	}
	if res.ExitCode == 3 {
		return "", offset, errs.TaskInvalidf("environment/Dockerfile: %s", strings.TrimSpace(res.Output))
	}
	if res.Dropped > 0 && !strings.Contains(res.Output, "---t1flow---") {
		return "", offset, errs.Infraf("pane output lost its marker (%d bytes dropped)", res.Dropped)
	}
	size, body, err := splitPane(res.Output)
	if err != nil {
		return "", offset, errs.Infraf("%v (exit %d)", err, res.ExitCode)
	}
	return body, size, nil
}
