package activities

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/trajectory"
)

// FinishEpisode assembles a model-driven episode on its sandbox host: the
// trajectory (policy agents) goes to the artifact store with its TITO drift
// audit and R3 routing report; the workflow gets the claim check.
func (a *Activities) FinishEpisode(ctx context.Context, in FinishEpisodeInput) (EpisodeResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)()
	ep, err := a.episode(in.RolloutID, in.Sandbox.Name)
	if err != nil {
		return EpisodeResult{}, err
	}
	res := EpisodeResult{Turns: len(ep.segs), StitchCases: map[string]int{}}
	versions := map[string]bool{}
	for _, c := range ep.contexts {
		if len(c.parts) > 0 && ep.all[c.parts[0]].PromptLen > 0 {
			res.StitchCases[harness.StitchInitial]++ // each context's first prompt, tokenized once
		}
	}
	for _, s := range ep.all {
		if s.Result.Stitch != "" {
			res.StitchCases[s.Result.Stitch]++
		}
		if s.Result.ParseError != "" {
			res.ParseErrors++
		}
		if s.Step == harness.StepSummary {
			res.Handoffs++
		}
		if s.Version != "" {
			versions[s.Version] = true
		}
	}
	for v := range versions {
		res.PolicyVersions = append(res.PolicyVersions, v)
	}
	sort.Strings(res.PolicyVersions)
	if in.Agent.Kind != AgentPolicy || ep.contexts[0].covered == 0 {
		return res, nil
	}
	pool, err := a.pool(in.Agent.Inference)
	if err != nil {
		return res, err
	}
	session := in.RolloutID + "/" + in.Sandbox.Name
	if err := a.loadFacts(ctx, pool, session, ep); err != nil {
		return res, err
	}
	f := ep.facts
	if f.MoE() {
		res.Routing = RoutingReport{Layers: len(f.MoELayers), TopK: f.TopK, Experts: f.Experts, Valid: true}
	}
	var assembled, reencoded [][]int32
	for i, c := range ep.contexts {
		if c.covered == 0 {
			continue
		}
		ref, err := a.finishContext(ctx, pool, session, in, ep, c, &res, &assembled, &reencoded)
		if err != nil {
			return res, err
		}
		if i == 0 {
			res.Trajectory = ref
		} else {
			res.Segments = append(res.Segments, *ref)
		}
	}
	if res.LossTokens > 0 {
		res.Drift.Drift = float64(res.Drift.LossMismatches) / float64(res.LossTokens)
	}
	if differ, total := harness.ReencodedTokens(assembled, reencoded); total > 0 {
		res.Drift.ReencodedContextShare = float64(differ) / float64(total)
	}
	return res, nil
}

// finishContext audits one token context (one training sample) and stores
// its trajectory, adding its counts to res.
func (a *Activities) finishContext(ctx context.Context, pool *inference.Pool, session string, in FinishEpisodeInput, ep *episode, c *tokenContext, res *EpisodeResult, assembled, reencoded *[][]int32) (*store.Ref, error) {
	f := ep.facts
	// Trailing glue after the last generation was never processed by the
	// sampler: the trajectory ends at its last sampled token.
	n := c.end()
	k := len(res.Segments)
	if res.Trajectory != nil {
		k++
	}
	rec := trajectory.Record{
		Tokens: c.tokens[:n], LossMask: c.mask[:n], Logprobs: c.logprobs[:n],
		Meta: map[string]string{"rollout_id": in.RolloutID, "task_id": in.Task.ID, "policy_versions": strings.Join(res.PolicyVersions, ","), "context": strconv.Itoa(k)},
	}
	if f.MoE() {
		rec.Routing, rec.Layers, rec.TopK, rec.Experts = c.routing, len(f.MoELayers), f.TopK, f.Experts
	}
	d, err := a.auditDrift(ctx, pool, session, ep, c, rec, assembled, reencoded)
	if err != nil {
		return nil, err
	}
	res.Drift.PromptMismatches += d.PromptMismatches
	res.Drift.LossMismatches += d.LossMismatches
	if d.PromptMismatches > 0 || d.LossMismatches > 0 {
		// Never trained on: the trajectory is not what the sampler saw and emitted.
		return nil, errs.RoutingMissingf("TITO drift audit, context %d: %d prompt and %d loss-region mismatches against what the sampler was sent and returned", k, d.PromptMismatches, d.LossMismatches)
	}
	if f.MoE() {
		// T−1 rows: every position but the last sampled token's.
		covered := len(c.routing) / (len(f.MoELayers) * f.TopK)
		res.Routing.Positions += n
		res.Routing.Covered += covered
		for _, i := range c.parts {
			res.Routing.Recomputed += ep.all[i].Recomputed
			res.Routing.Rerouted += ep.all[i].Rerouted
		}
		if covered != n-1 {
			res.Routing.Valid = false
			return nil, errs.RoutingMissingf("routing covers %d positions of a %d-token trajectory (context %d), which needs %d (T−1)", covered, n, k, n-1)
		}
	}
	res.Tokens += n
	for _, m := range rec.LossMask {
		res.LossTokens += int(m)
	}
	b, err := rec.Encode()
	if err != nil {
		return nil, errs.Infraf("encode trajectory: %v", err)
	}
	name := fmt.Sprintf("rollouts/%s/trajectory-%s.safetensors", ids.Clean(in.RolloutID), ids.Clean(in.Sandbox.Name))
	if k > 0 {
		name = fmt.Sprintf("rollouts/%s/trajectory-%s.context-%d.safetensors", ids.Clean(in.RolloutID), ids.Clean(in.Sandbox.Name), k)
	}
	ref, err := a.Store.Put(ctx, name, strings.NewReader(string(b)))
	if err != nil {
		return nil, errs.Infraf("store trajectory: %v", err)
	}
	return &ref, nil
}

// auditDrift runs the drift audit over one context's trajectory as it will
// be stored, against what the sampler was sent and returned in the
// segments of that context, and gathers what re-encoding the rendered
// conversation would have changed (one /tokenize per segment, special
// tokens parsed, as a text harness does).
func (a *Activities) auditDrift(ctx context.Context, pool *inference.Pool, session string, ep *episode, c *tokenContext, rec trajectory.Record, assembled, reencoded *[][]int32) (DriftReport, error) {
	turns := make([]harness.Turn, len(c.parts))
	for i, k := range c.parts {
		s := ep.all[k]
		turns[i] = harness.Turn{PromptLen: s.PromptLen, PromptHash: s.PromptHash, Sampled: s.Sampled, CheckSamplerMeta: s.SamplerMeta,
			MetaPrompt: s.MetaPrompt, MetaCompletion: s.MetaCompletion, LogprobIDs: s.LogprobIDs, SampledLogprobs: s.SampledLogprobs}
		if !s.SamplerMeta || len(s.Tokens) == 0 {
			continue
		}
		ids, err := a.tokenizer(pool).Tokenize(ctx, session, s.Rendered, false)
		if err != nil {
			return DriftReport{}, inferenceErr(err)
		}
		*assembled, *reencoded = append(*assembled, s.Tokens), append(*reencoded, toInt32(ids))
	}
	return harness.AuditDrift(rec.Tokens, rec.LossMask, rec.Logprobs, turns, len(rec.Tokens)), nil
}
