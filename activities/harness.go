package activities

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/httpjson"
	"github.com/t1flow/t1flow/internal/text"
	"github.com/t1flow/t1flow/sandbox"
)

// The harness's activity side: a model-driven turn asks the model (a policy
// token in, token out, or a chat model), types its answer into a tmux session
// in the sandbox, and reads the new terminal output back. What the model is
// told and how its answers are read is pure, in harness/.

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
func tmuxKeys(cmds []harness.Keys, budget time.Duration) string {
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

// terminalStep runs keystrokes (if any) and returns the pane output since
// offset; starting (if set) runs before anything is sent. It runs as user
// (agentUser's answer for the terminal), root when that is "".
func (a *Activities) terminalStep(ctx context.Context, id, user string, setup bool, cmds []harness.Keys, offset int64, budget time.Duration, starting func() error) (string, int64, error) {
	var script strings.Builder
	if setup {
		script.WriteString(tmuxSetup() + "\n")
	}
	script.WriteString(tmuxKeys(cmds, budget))
	script.WriteString(readPane(offset))
	// The raw output is capped later; allow enough here to find the marker.
	res, err := a.Docker.Exec(ctx, id, script.String(), sandbox.ExecOptions{
		Timeout: budget + 30*time.Second, User: cmp.Or(user, "root"), HeadCap: 1 << 10, TailCap: 64 << 10,
		Progress: func() { heartbeat.Record(ctx, "terminal") },
		Starting: starting,
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

const defaultMaxNewTokens = 512

// modelTurn runs one turn of a model-driven agent.
func (a *Activities) modelTurn(ctx context.Context, in TurnInput) (TurnResult, error) {
	// A long prefill, or a handoff's four generations, outlast the turn's
	// heartbeat timeout: a turn thought dead would be retried beside itself.
	defer heartbeat.Every(ctx, 3*time.Second, nil)()
	ep, err := a.episode(in.RolloutID, in.Sandbox.Name)
	if err != nil {
		return TurnResult{}, err
	}
	if in.Turn < len(ep.segs) {
		// The turn finished before a crash hid its result: report it, do not redo it.
		return ep.segs[in.Turn].Result, nil
	}
	if in.Turn != len(ep.segs) {
		return TurnResult{}, errs.Infraf("episode %s has %d turns, asked for turn %d", ep.dir, len(ep.segs), in.Turn)
	}
	if n := len(ep.segs); n > 0 && ep.segs[n-1].Done {
		return TurnResult{Turn: in.Turn, Done: true, EndReason: ep.segs[n-1].Result.EndReason}, nil
	}
	// Keystrokes are typed once: a retry resumes after them or reports the turn lost.
	if e, err := a.readJournal(in); err != nil || e != nil {
		if err == nil && e.State == journalTyped && e.Segment != nil && in.Agent.Kind == AgentPolicy {
			return a.afterTyping(ctx, in, ep, *e.Segment, e.Obs)
		}
		if err == nil {
			err = lostTurn(in, e)
		}
		return TurnResult{}, err
	}
	if in.Agent.Kind == AgentChat {
		return a.chatTurn(ctx, in, ep)
	}
	return a.policyTurn(ctx, in, ep)
}

// chatTurn drives a hosted model over chat completions: text in and out,
// eval only, so there are no token IDs to keep. On Terminus-2 nothing caps
// the reply and no temperature is sent unless the agent sets them (Harbor
// leaves both to the model), and a reply cut by the length limit is
// answered in the same turn.
func (a *Activities) chatTurn(ctx context.Context, in TurnInput, ep *episode) (TurnResult, error) {
	start := time.Now()
	key := ""
	if in.Agent.APIKeyEnv != "" {
		key = os.Getenv(in.Agent.APIKeyEnv)
	}
	cc := &inference.ChatClient{BaseURL: in.Agent.Endpoint, Model: in.Agent.Model, APIKey: key}
	seg := segment{Turn: in.Turn, PaneOffset: ep.offset}
	msgs := append([]inference.ChatMessage{}, ep.messages...)
	if in.Turn == 0 {
		obs, off, err := a.openEpisode(ctx, in)
		if err != nil {
			return TurnResult{}, err
		}
		seg.PaneOffset = off
		seg.Messages = harness.FirstMessages(obs)
		if in.Agent.Terminus2() {
			seg.Messages = []inference.ChatMessage{{Role: "user", Content: obs}}
		}
		msgs = append(msgs, seg.Messages...)
	}
	maxTok, temp := maxNewTokens(in.Agent), &in.Agent.Temperature
	if in.Agent.Terminus2() {
		maxTok = in.Agent.MaxNewTokens
		if in.Agent.Temperature == 0 {
			temp = nil
		}
	}
	reply, finish, err := cc.Complete(ctx, msgs, maxTok, temp)
	for retries := 0; err == nil && finish == "length" && in.Agent.Terminus2() && retries < maxLengthRetries; retries++ {
		var cut []inference.ChatMessage
		if cut, err = a.chatLengthRetry(ctx, in.Agent, reply); err != nil {
			return TurnResult{}, err
		}
		seg.Messages, msgs = append(seg.Messages, cut...), append(msgs, cut...)
		reply, finish, err = cc.Complete(ctx, msgs, maxTok, temp)
	}
	if err != nil {
		var se *httpjson.StatusError
		if errors.As(err, &se) && se.Status == 400 && strings.Contains(strings.ToLower(se.Msg), "context") {
			seg.Result = TurnResult{Turn: in.Turn, Done: true, EndReason: EndContextExhausted}
			seg.Done = true
			return seg.Result, ep.commit(seg)
		}
		return TurnResult{}, inferenceErr(err)
	}
	seg.Messages = append(seg.Messages, inference.ChatMessage{Role: "assistant", Content: reply})
	obs, _, err := a.act(ctx, in, &seg, reply, seg.PaneOffset, ep.pending)
	if err != nil {
		return TurnResult{}, err
	}
	if !seg.Done {
		seg.Messages = append(seg.Messages, inference.ChatMessage{Role: "user", Content: obs})
	}
	seg.Result.DurationMs = time.Since(start).Milliseconds()
	if err := ep.commit(seg); err != nil {
		return TurnResult{}, err
	}
	return seg.Result, nil
}

// chatLengthRetry is what a chat agent's cut reply adds to the
// conversation: the reply, then Terminus-2's answer to it.
func (a *Activities) chatLengthRetry(ctx context.Context, agent AgentSpec, reply string) ([]inference.ChatMessage, error) {
	s, err := a.harborSpec(ctx)
	if err != nil {
		return nil, err
	}
	msg, err := s.LengthRetry(reply, agent.MaxNewTokens)
	if err != nil {
		return nil, errs.Infraf("harbor %s: %v", s.HarborVersion, err)
	}
	return []inference.ChatMessage{{Role: "assistant", Content: reply}, {Role: "user", Content: msg}}, nil
}

// act types a model's answer into the sandbox's terminal (pane read from
// offset from) and records the turn's outcome in seg. It returns the next
// observation ("" once the task is confirmed complete) and the time spent in
// the terminal.
func (a *Activities) act(ctx context.Context, in TurnInput, seg *segment, reply string, from int64, pending bool) (string, int64, error) {
	if in.Agent.Terminus2() {
		return a.t2Act(ctx, in, seg, reply, pending)
	}
	action, cmds, summary, perr := harness.ParseTurn(reply)
	tTerm := time.Now()
	var starting func() error
	if len(cmds) > 0 {
		starting = a.journalStart(in, strings.Join(summary, " ; "))
	}
	user, err := a.agentUser(ctx, in, true)
	if err != nil {
		return "", 0, err
	}
	raw, off, err := a.terminalStep(ctx, in.Sandbox.ContainerID, user, false, cmds, from, time.Duration(in.TimeoutSec*float64(time.Second)), starting)
	if err != nil {
		return "", 0, sandboxErr(err, "turn %d in %s", in.Turn, in.Sandbox.Name)
	}
	if err := a.sent(in); err != nil {
		return "", 0, err
	}
	terminalMs := time.Since(tTerm).Milliseconds()
	seg.PaneOffset = off
	terminal := cleanTerminal(raw, 2048, 2048)
	if perr != nil {
		seg.Result.ParseError = perr.Error()
	}
	obs, confirm, done := harness.NextObservation(action, perr, pending, terminal)
	seg.Pending, seg.Done = confirm, done
	if done {
		seg.Result.Final, seg.Result.EndReason = true, EndTaskComplete
	}
	seg.Result.Turn = in.Turn
	seg.Result.Command = strings.Join(summary, " ; ")
	seg.Result.Preview = text.Truncate(terminal, PreviewBytes)
	seg.Result.OutputBytes = int64(len(raw))
	return obs, terminalMs, nil
}

func maxNewTokens(agent AgentSpec) int {
	if agent.MaxNewTokens <= 0 {
		return defaultMaxNewTokens
	}
	return agent.MaxNewTokens
}
