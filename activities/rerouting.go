package activities

import (
	"context"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// DefaultMaxRerouted is the share of recomputed context positions allowed to
// come back with other experts before a turn aborts (AgentSpec.MaxRerouted).
const DefaultMaxRerouted = 0.01

// checkRerouting compares, after a prefix-cache miss, the routing the
// sampler used for context positions the episode already holds with the
// episode's. The server reuses cached_tokens prompt positions with their
// recorded experts; fewer than the positions held means the rest were re-run
// (eviction, a restarted or other replica) and this turn was sampled under
// whatever routing they got then, which the trajectory does not hold. A
// second request (one token, answered from the cache the miss refilled)
// returns that routing; mismatched positions are counted in seg, and above
// the agent's share the turn aborts as RoutingMissing (a fresh sandbox retries).
func (e *episode) checkRerouting(ctx context.Context, pool *inference.Pool, session string, agent AgentSpec, seg *segment, prompt []int32, cached int) error {
	held := e.covered
	if cached >= held || held == 0 {
		return nil
	}
	g, err := pool.Generate(ctx, session, inference.Request{
		InputIDs: toInts(prompt), Temperature: agent.Temperature, MaxNewTokens: 1,
		Routing: true, RoutingStart: cached,
	})
	if err != nil {
		return inferenceErr(err)
	}
	now, err := harness.CaptureRouting(g, *e.facts, cached, len(prompt)+len(g.OutputIDs)-1)
	if err != nil {
		return err
	}
	layers, k := len(e.facts.MoELayers), e.facts.TopK
	per := layers * k
	seg.Recomputed = held - cached
	seg.Rerouted = harness.ReroutedPositions(e.routing[cached*per:held*per], now[:(held-cached)*per], layers, k)
	limit := agent.MaxRerouted
	if limit <= 0 {
		limit = DefaultMaxRerouted
	}
	if float64(seg.Rerouted) > limit*float64(seg.Recomputed) {
		return errs.RoutingMissingf("routing drift: the sampler re-ran %d held context positions (cached_tokens %d of %d) and %d came back with other experts, more than %.0f%%: R3 would replay routing this turn was not sampled under",
			seg.Recomputed, cached, held, seg.Rerouted, 100*limit)
	}
	return nil
}
