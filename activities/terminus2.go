package activities

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/text"
	"github.com/t1flow/t1flow/sandbox"
)

// The Terminus-2 terminal, as Harbor's TmuxSession drives it: a tmux session
// named terminus-2 running `bash --login` as the task's agent.user (else the
// image's USER: agentUser), keystrokes sent with `tmux send-keys` without -l (so "C-c",
// "Escape", "Enter" are keys and other text is typed as it is), each
// command's duration waited out, and the observation read from the rendered
// screen: the scrollback (capture-pane -S -) after the last capture, or the
// visible screen (harness.Spec.IncrementalOutput).

const (
	t2Session = "terminus-2"
	// t2Capture holds the last scrollback capture, in the sandbox, so a
	// restarted worker diffs against the same text.
	t2Capture = "/tmp/.t1flow-terminus2.capture"
	t2Marker  = "---t1flow-terminus2---"
	// tmux refuses commands over ~16 KB: a longer key goes through a paste
	// buffer, as Harbor's _paste_key does.
	t2MaxSendKey = 16000 - 64
)

// harborSpec is Terminus-2's spec from the installed Harbor (cached per process).
func (a *Activities) harborSpec(ctx context.Context) (*harness.Spec, error) {
	s, err := harbor.Load(ctx)
	if err != nil {
		return nil, errs.Infraf("harness %s: %v", harness.Terminus2, err)
	}
	return s, nil
}

// t2Setup starts the session once, as Harbor's TmuxSession.start does.
func t2Setup(s *harness.Spec) string {
	return fmt.Sprintf(`command -v tmux >/dev/null || { echo "tmux is not installed in the sandbox image" >&2; exit 3; }
if ! tmux has-session -t %[1]s 2>/dev/null; then
  export TERM=xterm-256color && export SHELL=/bin/bash && tmux new-session -x %[2]d -y %[3]d -d -s %[1]s 'bash --login' || exit 4
  tmux set-option -g history-limit 10000000 || true
  rm -f %[4]s
  sleep 0.5
fi
`, t2Session, s.PaneWidth, s.PaneHeight, t2Capture)
}

// t2Keys sends each command's keystrokes as one tmux key and waits out its
// duration (less the time the send took), within budget.
func t2Keys(cmds []harness.Keys, budget time.Duration) string {
	var b strings.Builder
	left := budget.Seconds()
	for i, c := range cmds {
		b.WriteString("t0=$(date +%s%N)\n")
		switch k := c.Keystrokes; {
		case k == "":
			fmt.Fprintf(&b, "tmux send-keys -t %s -- ''\n", t2Session)
		case len(text.ShellQuote(k)) <= t2MaxSendKey:
			fmt.Fprintf(&b, "tmux send-keys -t %s -- %s\n", t2Session, text.ShellQuote(k))
		default:
			f := fmt.Sprintf("/tmp/.t1flow-paste-%d", i)
			fmt.Fprintf(&b, "base64 -d > %s <<'T1FLOW_PASTE'\n%s\nT1FLOW_PASTE\n", f, base64.StdEncoding.EncodeToString([]byte(k)))
			fmt.Fprintf(&b, "tmux load-buffer -b t1flow-paste %[1]s && tmux paste-buffer -d -b t1flow-paste -t %[2]s; rm -f %[1]s\n", f, t2Session)
		}
		d := min(c.Duration, left)
		if d > 0 {
			ms := int64(d * 1000)
			fmt.Fprintf(&b, "w=$(( %d - ($(date +%%s%%N) - t0) / 1000000 )); [ $w -gt 0 ] && sleep $(printf '%%d.%%03d' $((w / 1000)) $((w %% 1000)))\n", ms)
			left -= d
		}
	}
	return b.String()
}

// t2Read prints, after a marker line, three base64 lines: the previous
// capture ("none" before the first), the scrollback now (kept as the next
// previous capture) and the visible screen, each as capture-pane wrote it.
func t2Read() string {
	return fmt.Sprintf(`echo; echo '%[3]s'
if [ -f %[1]s ]; then base64 -w0 %[1]s; else printf none; fi; echo
tmux capture-pane -p -S - -t %[2]s > %[1]s.new && base64 -w0 %[1]s.new && mv %[1]s.new %[1]s; echo
tmux capture-pane -p -t %[2]s | base64 -w0; echo
`, t2Capture, t2Session, t2Marker)
}

// splitT2 parses t2Read's output.
func splitT2(out string) (prev *string, current, visible string, err error) {
	i := strings.LastIndex(out, "\n"+t2Marker+"\n")
	if i < 0 {
		return nil, "", "", fmt.Errorf("terminal read: marker missing in %q", text.Truncate(out, 200))
	}
	lines := strings.Split(strings.TrimRight(out[i+len(t2Marker)+2:], "\n"), "\n")
	if len(lines) != 3 {
		return nil, "", "", fmt.Errorf("terminal read: %d lines after the marker, want 3", len(lines))
	}
	var dec [3]string
	for k, l := range lines {
		if k == 0 && l == "none" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(l)
		if err != nil {
			return nil, "", "", fmt.Errorf("terminal read: line %d: %v", k+1, err)
		}
		dec[k] = string(b)
	}
	if lines[0] != "none" {
		prev = &dec[0]
	}
	return prev, dec[1], dec[2], nil
}

// t2Step (setup: first starts the session) sends cmds and returns the
// incremental output. starting runs before anything is sent.
// user is agentUser's answer ("" for root), as Harbor runs the terminal.
func (a *Activities) t2Step(ctx context.Context, s *harness.Spec, id, user string, setup bool, cmds []harness.Keys, budget time.Duration, starting func() error) (string, int64, error) {
	var script strings.Builder
	if setup {
		script.WriteString(t2Setup(s))
	}
	script.WriteString(t2Keys(cmds, budget))
	script.WriteString(t2Read())
	res, err := a.Docker.Exec(ctx, id, script.String(), sandbox.ExecOptions{
		Timeout: budget + 30*time.Second, HeadCap: 32 << 20, TailCap: 1 << 20, User: user,
		Progress: func() { heartbeat.Record(ctx, "terminal") },
		Starting: starting,
	})
	if err != nil {
		return "", 0, err
	}
	switch {
	case res.ExitCode == 3:
		return "", 0, errs.TaskInvalidf("environment/Dockerfile: %s", strings.TrimSpace(res.Output))
	case res.ExitCode == 4:
		return "", 0, errs.Infraf("tmux new-session failed: %s", text.Truncate(res.Output, 500))
	case res.Dropped > 0:
		return "", 0, errs.Infraf("terminal read: %d bytes of the capture dropped", res.Dropped)
	}
	prev, current, visible, err := splitT2(res.Output)
	if err != nil {
		return "", 0, errs.Infraf("%v (exit %d)", err, res.ExitCode)
	}
	return s.IncrementalOutput(prev, current, visible), res.Bytes, nil
}

// t2Open starts the terminal and renders Terminus-2's first prompt.
func (a *Activities) t2Open(ctx context.Context, in TurnInput, instruction string) (string, error) {
	s, err := a.harborSpec(ctx)
	if err != nil {
		return "", err
	}
	user, err := a.agentUser(ctx, in, true)
	if err != nil {
		return "", err
	}
	incr, _, err := a.t2Step(ctx, s, in.Sandbox.ContainerID, user, true, nil, 0, nil)
	if err != nil {
		return "", sandboxErr(err, "start the terminal in %s", in.Sandbox.Name)
	}
	prompt, err := s.FirstPrompt(instruction, s.Limit(incr))
	if err != nil {
		return "", errs.Infraf("harbor %s: %v", s.HarborVersion, err)
	}
	return prompt, nil
}

// t2Act is act on Terminus-2's rules: a reply with a parse error runs
// nothing and reads nothing (its feedback is the observation, and a pending
// task_complete stays pending); otherwise its commands run and the
// incremental output, with any warnings, comes back.
func (a *Activities) t2Act(ctx context.Context, in TurnInput, seg *segment, reply string, pending bool) (string, int64, error) {
	s, err := a.harborSpec(ctx)
	if err != nil {
		return "", 0, err
	}
	p := s.Parse(reply)
	summary := make([]string, 0, len(p.Commands))
	for _, c := range p.Commands {
		summary = append(summary, strings.TrimSpace(c.Keystrokes))
	}
	seg.Result.Turn = in.Turn
	seg.Result.Command = strings.Join(summary, " ; ")
	seg.Result.ParseError = p.Error
	if p.Error != "" {
		obs, confirm, _ := s.Next(p, pending, "")
		seg.Pending = confirm
		return obs, 0, nil
	}
	var starting func() error
	if len(p.Commands) > 0 {
		starting = a.journalStart(in, seg.Result.Command)
	}
	user, err := a.agentUser(ctx, in, true)
	if err != nil {
		return "", 0, err
	}
	tTerm := time.Now()
	incr, n, err := a.t2Step(ctx, s, in.Sandbox.ContainerID, user, false, p.Commands, time.Duration(in.TimeoutSec*float64(time.Second)), starting)
	if err != nil {
		return "", 0, sandboxErr(err, "turn %d in %s", in.Turn, in.Sandbox.Name)
	}
	if err := a.sent(in); err != nil {
		return "", 0, err
	}
	obs, confirm, done := s.Next(p, pending, incr)
	seg.Pending, seg.Done = confirm, done
	if done {
		seg.Result.Final, seg.Result.EndReason = true, EndTaskComplete
	}
	seg.Result.Preview = text.Truncate(incr, PreviewBytes)
	seg.Result.OutputBytes = n
	return obs, time.Since(tTerm).Milliseconds(), nil
}

// t2Screen is the visible screen, as Harbor's capture_pane() reads it for
// the handoff's question request (no keys sent, the diff left alone).
func (a *Activities) t2Screen(ctx context.Context, in TurnInput) (string, error) {
	user, err := a.agentUser(ctx, in, true)
	if err != nil {
		return "", err
	}
	res, err := a.Docker.Exec(ctx, in.Sandbox.ContainerID, fmt.Sprintf("tmux capture-pane -p -t %s", t2Session), sandbox.ExecOptions{
		Timeout: 30 * time.Second, HeadCap: 1 << 20, TailCap: 1 << 20, User: user,
	})
	switch {
	case err != nil:
		return "", sandboxErr(err, "read the screen in %s", in.Sandbox.Name)
	case res.ExitCode != 0:
		return "", errs.Infraf("tmux capture-pane exited %d: %s", res.ExitCode, text.Truncate(res.Output, 300))
	}
	return res.Output, nil
}
