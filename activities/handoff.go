package activities

import (
	"context"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// Terminus-2's context handoff and its retry of a reply cut by the length
// limit, for the policy (token in, token out): every generation is a
// segment of its own, recorded in the context its sampler saw, so TITO
// stays exact across the boundary (harness/handoff.go says what is sent).

// maxLengthRetries bounds the length retries of one turn: Harbor's has no
// bound but the context, and a policy that never ends its reply would
// loop until it is full.
const maxLengthRetries = 3

// lastContext is the context of the last committed segment.
func (e *episode) lastContext() int {
	if n := len(e.all); n > 0 {
		return e.all[n-1].Context
	}
	return 0
}

// nextContext is the index a newly opened context gets.
func (e *episode) nextContext() int {
	n := 0
	for _, s := range e.all {
		n = max(n, s.Context+1)
	}
	return n
}

// handoffDue is whether the turn starts with a handoff: one is under way
// (a retried turn resumes it), or fewer than the threshold's tokens of
// context remain after the last reply (Harbor counts the conversation
// without the pending observation).
func (e *episode) handoffDue(agent AgentSpec, s *harness.Spec, limit int) bool {
	if n := len(e.partial); n > 0 {
		return e.partial[n-1].Step != harness.StepLengthRetry
	}
	th := agent.HandoffTokens
	if th == 0 {
		th = s.SummarizeThreshold
	}
	return th > 0 && limit-e.end() < th
}

// t2Budget is a Terminus-2 generation's max_new_tokens: the agent's cap if
// it sets one, else all that is left of the context (Harbor sets none).
func t2Budget(agent AgentSpec, prompt, limit int) int {
	left := limit - prompt
	if agent.MaxNewTokens > 0 {
		return min(agent.MaxNewTokens, left)
	}
	return left
}

// subStep samples one partial segment of a turn in context c over prompt
// (the context's tokens from keep on, then glue) and commits it. A step
// that does not fit returns ok false.
func (a *Activities) subStep(ctx context.Context, in TurnInput, ep *episode, pool *inference.Pool, session string, step string, c, keep int, glue harness.Pieces, request string, limit int) (segment, bool, error) {
	ids, err := tokenize(ctx, a.tokenizer(pool), session, glue)
	if err != nil {
		return segment{}, false, err
	}
	ep.use(c)
	seg := segment{Turn: in.Turn, Partial: true, Step: step, Context: c, Rewind: len(ep.tokens) - keep, Rendered: glue.String(), Prompt: request}
	prompt := append(append([]int32{}, ep.tokens[:keep]...), ids...)
	budget := t2Budget(in.Agent, len(prompt), limit)
	if budget < 1 {
		return seg, false, nil
	}
	reply, err := a.sample(ctx, ep, pool, session, in.Agent, &seg, prompt, ids, budget)
	if err != nil {
		return seg, false, err
	}
	seg.Reply = reply
	return seg, true, ep.commit(seg)
}

// handoff runs (or resumes) Terminus2._summarize's three sub-steps and
// returns the continuing context's opening tokens, their text and its
// index; nil tokens when a step did not fit in the context (the episode
// ends as context_exhausted, where Harbor would first unwind messages).
func (a *Activities) handoff(ctx context.Context, in TurnInput, s *harness.Spec, ep *episode, pool *inference.Pool, session string, limit int) ([]int32, string, int, error) {
	done := map[string]segment{}
	for _, p := range ep.partial {
		done[p.Step] = p
	}
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return nil, "", 0, err
	}
	fail := func(err error) ([]int32, string, int, error) {
		if err != nil {
			return nil, "", 0, errs.Infraf("harbor %s handoff: %v", s.HarborVersion, err)
		}
		return nil, "", 0, nil
	}
	sum, ok := done[harness.StepSummary]
	if !ok {
		text, err := s.HandoffSummary(t.Instruction)
		if err != nil {
			return fail(err)
		}
		old := ep.lastContext()
		ep.use(old)
		stitch := ep.all[ep.parts[len(ep.parts)-1]].Result.Stitch
		if sum, ok, err = a.subStep(ctx, in, ep, pool, session, harness.StepSummary, old, ep.end(), harness.GluePieces(ep.chat, text, stitch), "", limit); err != nil || !ok {
			return nil, "", 0, err
		}
	}
	q, ok := done[harness.StepQuestions]
	if !ok {
		screen, err := a.t2Screen(ctx, in)
		if err != nil {
			return nil, "", 0, err
		}
		text, err := s.HandoffQuestions(t.Instruction, sum.Reply, screen)
		if err != nil {
			return fail(err)
		}
		if q, ok, err = a.subStep(ctx, in, ep, pool, session, harness.StepQuestions, ep.nextContext(), 0, harness.UserFirstPieces(ep.chat, text), text, limit); err != nil || !ok {
			return nil, "", 0, err
		}
	}
	if _, ok := done[harness.StepAnswers]; !ok {
		text, err := s.HandoffAnswers(q.Reply)
		if err != nil {
			return fail(err)
		}
		ep.use(sum.Context)
		if _, ok, err = a.subStep(ctx, in, ep, pool, session, harness.StepAnswers, sum.Context, len(ep.tokens), harness.GluePieces(ep.chat, text, sum.Result.Stitch), "", limit); err != nil || !ok {
			return nil, "", 0, err
		}
	}
	ans := ep.partial[len(ep.partial)-1]
	cont, err := s.HandoffContinue(ans.Reply)
	if err != nil {
		return fail(err)
	}
	// The continuing context: the first prompt, the question request and
	// the questions as the sampler emitted them (context now, masked), then
	// the continue prompt in place of the pending observation.
	open := harness.HandoffContextPieces(ep.chat, ep.all[0].Prompt, q.Prompt)
	head, err := tokenize(ctx, a.tokenizer(pool), session, open)
	if err != nil {
		return nil, "", 0, err
	}
	next := harness.GluePieces(ep.chat, cont, q.Result.Stitch)
	tail, err := tokenize(ctx, a.tokenizer(pool), session, next)
	if err != nil {
		return nil, "", 0, err
	}
	ids := append(append(head, q.Sampled...), tail...)
	return ids, open.String() + q.Reply + next.String(), q.Context + 1, nil
}

// retryOnLength answers a reply cut by the length limit as Harbor's
// _query_llm does, in the same turn: the cut reply (sampled tokens, in the
// loss mask) and the answer (context, masked) become a partial segment, and
// the policy replies again; seg then holds the new reply. A retry that
// would not fit, or past maxLengthRetries, leaves the cut reply to be
// parsed as it is.
func (a *Activities) retryOnLength(ctx context.Context, in TurnInput, s *harness.Spec, ep *episode, pool *inference.Pool, session string, seg *segment, reply string, limit int) (string, error) {
	retries := 0
	for _, p := range ep.partial {
		if p.Step == harness.StepLengthRetry {
			retries++
		}
	}
	for seg.Result.Stitch == harness.StitchLength && retries < maxLengthRetries {
		msg, err := s.LengthRetry(reply, in.Agent.MaxNewTokens)
		if err != nil {
			return "", errs.Infraf("harbor %s: %v", s.HarborVersion, err)
		}
		glue := harness.GluePieces(ep.chat, msg, harness.StitchLength)
		ids, err := tokenize(ctx, a.tokenizer(pool), session, glue)
		if err != nil {
			return "", err
		}
		prompt := len(ep.tokens) + len(seg.Tokens) + len(ids)
		budget := t2Budget(in.Agent, prompt, limit)
		if budget < 1 {
			break
		}
		cut := *seg
		cut.Partial, cut.Step, cut.Reply = true, harness.StepLengthRetry, reply
		cut.Tokens = append(cut.Tokens, ids...)
		cut.LossMask = append(cut.LossMask, make([]uint8, len(ids))...)
		cut.Logprobs = append(cut.Logprobs, make([]float32, len(ids))...)
		cut.Rendered += glue.String()
		if err := ep.commit(cut); err != nil {
			return "", err
		}
		retries++
		*seg = segment{Turn: in.Turn, Context: cut.Context}
		if reply, err = a.sample(ctx, ep, pool, session, in.Agent, seg, append([]int32{}, ep.tokens...), nil, budget); err != nil {
			return "", err
		}
	}
	return reply, nil
}
