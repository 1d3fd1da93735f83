package activities

import (
	"context"
	"time"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// policyTurn drives the policy token in, token out: the context is the
// episode's tokens plus glue tokenized from text, never re-encoded output.
// On Terminus-2 a turn may first hand off to a fresh context, and answers a
// reply cut by the length limit in the same turn (handoff.go).
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
	ep.use(ep.lastContext()) // a failed try may have left another current
	seg := segment{Turn: in.Turn, Context: ep.current()}
	var glue []int32
	if in.Turn == 0 && len(ep.partial) == 0 {
		obs, off, err := a.openEpisode(ctx, in)
		if err != nil {
			return TurnResult{}, err
		}
		seg.PaneOffset = off
		first := harness.FirstPromptPieces(ep.chat, obs)
		if in.Agent.Terminus2() {
			first, seg.Prompt = harness.UserFirstPieces(ep.chat, obs), obs
		}
		if glue, err = tokenize(ctx, a.tokenizer(pool), session, first); err != nil {
			return TurnResult{}, err
		}
		seg.Rendered = first.String()
	}
	limit := ep.facts.ContextLen
	if in.Agent.MaxContext > 0 && in.Agent.MaxContext < limit {
		limit = in.Agent.MaxContext
	}
	t2 := in.Agent.Terminus2()
	var spec *harness.Spec
	if t2 {
		if spec, err = a.harborSpec(ctx); err != nil {
			return TurnResult{}, err
		}
	}
	if t2 && in.Turn > 0 && ep.handoffDue(in.Agent, spec, limit) {
		g, rendered, c, err := a.handoff(ctx, in, spec, ep, pool, session, limit)
		if err != nil || g == nil {
			return a.exhausted(ep, seg, err)
		}
		ep.use(c)
		seg.Context, glue, seg.Rendered = c, g, rendered
	}
	prompt := append(append([]int32{}, ep.tokens...), glue...)
	budget := maxNewTokens(in.Agent)
	if t2 {
		budget = t2Budget(in.Agent, len(prompt), limit)
	}
	if budget < 1 || len(prompt)+budget > limit {
		// A normal end, not a failure: the next turn would not fit.
		return a.exhausted(ep, seg, nil)
	}
	reply, err := a.sample(ctx, ep, pool, session, in.Agent, &seg, prompt, glue, budget)
	if err != nil {
		return TurnResult{}, err
	}
	if t2 {
		if reply, err = a.retryOnLength(ctx, in, spec, ep, pool, session, &seg, reply, limit); err != nil {
			return TurnResult{}, err
		}
	}
	for _, p := range ep.partial {
		seg.Result.Tokens += len(p.Sampled) // the turn's cut replies and handoff steps
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

// sample is ep.sample with the reply's text decoded by the model-files
// sidecar when the engine sent token IDs only (stock vLLM's token mode).
func (a *Activities) sample(ctx context.Context, ep *episode, pool *inference.Pool, session string, agent AgentSpec, seg *segment, prompt, glue []int32, maxNew int) (string, error) {
	reply, err := ep.sample(ctx, pool, session, agent, seg, prompt, glue, maxNew)
	if err == nil && reply == "" {
		reply, err = a.replyText(ctx, ep, seg)
	}
	return reply, err
}

// sample runs one generation over prompt (the episode's tokens, then this
// turn's glue) and records in seg what the trajectory needs: the sampled IDs
// verbatim, their log-probs, the routed experts of every position since the
// last capture, and the stitch case. It returns the reply's text.
func (e *episode) sample(ctx context.Context, pool *inference.Pool, session string, agent AgentSpec, seg *segment, prompt, glue []int32, maxNew int) (string, error) {
	eot := *e.chat.EndOfTurnID
	tInf := time.Now()
	moe := e.facts.MoE() // R3: routing for every MoE layer; a dense model has none
	g, err := pool.Generate(ctx, session, inference.Request{
		InputIDs: toInts(prompt), Temperature: agent.Temperature, MaxNewTokens: maxNew, StopTokenIDs: []int{eot},
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

// exhausted ends the episode as context_exhausted (a normal end, not a
// failure), or returns err.
func (a *Activities) exhausted(ep *episode, seg segment, err error) (TurnResult, error) {
	if err != nil {
		return TurnResult{}, err
	}
	seg.Result = TurnResult{Turn: seg.Turn, Done: true, EndReason: EndContextExhausted}
	seg.Done, seg.Partial, seg.Step = true, false, ""
	seg.PaneOffset = max(seg.PaneOffset, ep.offset)
	return seg.Result, ep.commit(seg)
}
