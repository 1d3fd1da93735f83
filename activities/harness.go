package activities

import (
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
// offset; starting (if set) runs before anything is sent.
func (a *Activities) terminalStep(ctx context.Context, id string, setup bool, cmds []harness.Keys, offset int64, budget time.Duration, starting func() error) (string, int64, error) {
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

// policyTurn drives the policy token in, token out: the context is the
// episode's tokens plus glue tokenized from text, never re-encoded output.
func (a *Activities) policyTurn(ctx context.Context, in TurnInput, ep *episode) (TurnResult, error) {
	start := time.Now()
	pool, err := a.pool(in.Agent.Inference)
	if err != nil {
		return TurnResult{}, err
	}
	session := in.RolloutID + "/" + in.Sandbox.Name
	if err := ep.model(ctx, pool, a.modelFiles(), session); err != nil {
		return TurnResult{}, err
	}
	if err := a.loadFacts(ctx, pool, session, ep); err != nil {
		return TurnResult{}, err
	}
	seg := segment{Turn: in.Turn}
	var glue []int32
	if in.Turn == 0 {
		obs, off, err := a.openEpisode(ctx, in)
		if err != nil {
			return TurnResult{}, err
		}
		seg.PaneOffset = off
		first := harness.FirstPromptPieces(ep.chat, obs)
		if in.Agent.Terminus2() {
			first = harness.UserFirstPieces(ep.chat, obs)
		}
		if glue, err = tokenize(ctx, a.tokenizer(pool), session, first); err != nil {
			return TurnResult{}, err
		}
		seg.Rendered = first.String()
	}
	prompt := append(append([]int32{}, ep.tokens...), glue...)
	limit := ep.facts.ContextLen
	if in.Agent.MaxContext > 0 && in.Agent.MaxContext < limit {
		limit = in.Agent.MaxContext
	}
	if len(prompt)+maxNewTokens(in.Agent) > limit {
		// A normal end, not a failure: the next turn would not fit.
		seg.Result = TurnResult{Turn: in.Turn, Done: true, EndReason: EndContextExhausted}
		seg.Done = true
		seg.PaneOffset = max(seg.PaneOffset, ep.offset)
		return seg.Result, ep.commit(seg)
	}
	reply, err := ep.sample(ctx, pool, session, in.Agent, &seg, prompt, glue)
	if err == nil && reply == "" {
		reply, err = a.replyText(ctx, ep, &seg)
	}
	if err != nil {
		return TurnResult{}, err
	}
	obs, terminalMs, err := a.act(ctx, in, &seg, reply, ep.offset, ep.pending)
	if err != nil {
		return TurnResult{}, err
	}
	seg.Result.TerminalMs = terminalMs
	seg.Result.DurationMs = time.Since(start).Milliseconds()
	// What was typed and seen is journaled before anything else can fail:
	// a retry continues from here and never samples or types this turn again.
	if err := a.writeJournal(in, journalEntry{State: journalTyped, Command: seg.Result.Command, Segment: &seg, Obs: obs}); err != nil {
		return TurnResult{}, err
	}
	return a.afterTyping(ctx, in, ep, seg, obs)
}

// afterTyping ends a policy turn whose keystrokes were sent: the next turn's
// observation glue is tokenized once (masked) and the turn is committed.
func (a *Activities) afterTyping(ctx context.Context, in TurnInput, ep *episode, seg segment, obs string) (TurnResult, error) {
	start := time.Now()
	if !seg.Done {
		pool, err := a.pool(in.Agent.Inference)
		if err != nil {
			return TurnResult{}, err
		}
		session := in.RolloutID + "/" + in.Sandbox.Name
		// After a restart the journal replays this half without the model info.
		if err := ep.model(ctx, pool, a.modelFiles(), session); err != nil {
			return TurnResult{}, err
		}
		next := harness.GluePieces(ep.chat, obs, seg.Result.Stitch)
		ids, err := tokenize(ctx, a.tokenizer(pool), session, next)
		if err != nil {
			return TurnResult{}, err
		}
		seg.Rendered += next.String()
		seg.Tokens = append(seg.Tokens, ids...)
		seg.LossMask = append(seg.LossMask, make([]uint8, len(ids))...)
		seg.Logprobs = append(seg.Logprobs, make([]float32, len(ids))...)
	}
	seg.Result.DurationMs += time.Since(start).Milliseconds()
	if err := ep.commit(seg); err != nil {
		return TurnResult{}, err
	}
	return seg.Result, nil
}

// model fetches the served model's info and chat template once per episode
// (per worker) and checks the template against the tokenizer: its end of turn
// must encode as exactly the end_of_turn_id the sampler stops on. With a
// model-files sidecar (mf) the template and tokenizer are the checkpoint's
// own files; without one, the engine's /get_model_info chat (t1flow's servers).
func (e *episode) model(ctx context.Context, pool *inference.Pool, mf *harness.ModelFiles, session string) error {
	if e.info != nil {
		return nil
	}
	// The facts come from the checkpoint's files when a sidecar serves them:
	// a stock engine has no /get_model_info.
	info, err := sidecarModelInfo(ctx, mf)
	if mf == nil {
		info, err = pool.ModelInfo(ctx, session)
	}
	if err != nil {
		return inferenceErr(err)
	}
	var chat inference.ChatTemplate
	var tk tokenizer = pool
	source := "inference " + info.ModelPath
	if mf != nil {
		c, err := mf.Chat(ctx)
		if err != nil {
			return inferenceErr(err)
		}
		chat, tk, source = c.ChatTemplate, sidecarTokenizer{mf}, "model files "+mf.BaseURL
		if err := harness.CheckTemplate(source+"/chat", chat, info.VocabSize); err != nil {
			return err
		}
	} else if chat, err = harness.Template(info); err != nil {
		return err
	}
	ids, err := tk.Tokenize(ctx, session, chat.EndOfTurn, false)
	if err != nil {
		return inferenceErr(err)
	}
	if len(ids) != 1 || ids[0] != *chat.EndOfTurnID {
		return errs.BadInputf("%s: chat.end_of_turn %q tokenizes as %v, not as chat.end_of_turn_id %d", source, chat.EndOfTurn, ids, *chat.EndOfTurnID)
	}
	e.info, e.chat = &info, chat
	return nil
}

// sample runs one generation over prompt (the episode's tokens, then this
// turn's glue) and records in seg what the trajectory needs: the sampled IDs
// verbatim, their log-probs, the routed experts of every position since the
// last capture, and the stitch case. It returns the reply's text.
func (e *episode) sample(ctx context.Context, pool *inference.Pool, session string, agent AgentSpec, seg *segment, prompt, glue []int32) (string, error) {
	eot := *e.chat.EndOfTurnID
	tInf := time.Now()
	moe := e.facts.MoE() // R3: routing for every MoE layer; a dense model has none
	g, err := pool.Generate(ctx, session, inference.Request{
		InputIDs: toInts(prompt), Temperature: agent.Temperature, MaxNewTokens: maxNewTokens(agent), StopTokenIDs: []int{eot},
		Logprobs: true, Routing: moe, RoutingStart: e.covered,
	})
	if err != nil {
		return "", inferenceErr(err) // an abort is an InfraError: retried, never a sample
	}
	seg.Result.InferenceMs = time.Since(tInf).Milliseconds()
	// How it ended decides the stitch, and an unknown end is an error before
	// anything of the reply is read.
	if seg.Result.Stitch, err = harness.StitchCase(g, eot); err != nil {
		return "", err
	}
	out := toInt32(g.OutputIDs)
	if len(g.Logprobs) != len(out) {
		return "", errs.Infraf("inference: %d log-probs for %d tokens", len(g.Logprobs), len(out))
	}
	// T−1 rows: positions [covered, prompt+output−1); the last sampled token has none.
	to := len(prompt) + len(out) - 1
	var routing []int32
	if moe {
		if routing, err = harness.CaptureRouting(g, *e.facts, e.covered, to); err != nil {
			return "", err
		}
		if err := e.checkRerouting(ctx, pool, session, agent, seg, prompt, g.CachedTokens); err != nil {
			return "", err
		}
	}
	seg.SamplerMeta = true
	seg.MetaPrompt, seg.MetaCompletion = g.PromptTokens, g.Completion
	seg.SampledLogprobs = g.Logprobs
	seg.LogprobIDs = g.LogprobIDs
	seg.Rendered += g.Text
	seg.PromptLen, seg.PromptHash = len(prompt), harness.HashTokens(prompt)
	seg.Sampled = out
	seg.Version = g.WeightVersion
	seg.CoveredFrom, seg.CoveredTo = e.covered, to
	seg.Routing = routing
	// Context glue of this turn (the first prompt), then the sampled tokens.
	seg.Tokens = append(glue, out...)
	seg.LossMask = append(make([]uint8, len(glue)), ones(len(out))...)
	seg.Logprobs = append(make([]float32, len(glue)), g.Logprobs...)
	seg.Result.Tokens = len(out)
	return g.Text, nil
}

// chatTurn drives a hosted model over chat completions: text in and out,
// eval only, so there are no token IDs to keep.
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
	reply, _, err := cc.Complete(ctx, msgs, maxNewTokens(in.Agent), in.Agent.Temperature)
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
	raw, off, err := a.terminalStep(ctx, in.Sandbox.ContainerID, false, cmds, from, time.Duration(in.TimeoutSec*float64(time.Second)), starting)
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
