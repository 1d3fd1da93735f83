package harness

import (
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// Stitch cases: how one turn's sampled tokens join the next turn's context.
// Every boundary falls in exactly one case, recorded per turn.
const (
	StitchInitial    = "initial"     // the first prompt, tokenized once
	StitchEOT        = "eot"         // stopped on the end-of-turn token: observation glue follows the sampled tokens
	StitchEOS        = "eos"         // stopped on another stop token: end of turn added as glue (masked)
	StitchLength     = "length"      // hit max_new_tokens: end of turn added as glue (masked)
	StitchStopString = "stop_string" // stopped on a stop string: end of turn added as glue (masked)
)

// StitchCase names how generation stopped; eot is the end-of-turn token ID
// (the chat template's EndOfTurnID). The engine client has already turned an
// abort (SGLang's abort finish reason, a NaN log-prob, vLLM's abort or error)
// into an *inference.AbortError and an unknown finish reason into an error,
// never taken for "length", since it would stitch a turn whose end nobody
// knows.
func StitchCase(g *inference.Generation, eot int) (string, error) {
	switch g.Finish.Kind {
	case inference.FinishLength:
		return StitchLength, nil
	case inference.FinishStop:
		switch {
		case g.Finish.MatchedToken != nil && *g.Finish.MatchedToken == eot:
			return StitchEOT, nil
		case g.Finish.MatchedToken != nil:
			return StitchEOS, nil
		case g.Finish.MatchedText != "":
			return StitchStopString, nil
		case len(g.OutputIDs) > 0 && g.OutputIDs[len(g.OutputIDs)-1] == eot:
			return StitchEOT, nil // an engine that does not name the stop token (vLLM)
		}
		return StitchEOS, nil
	}
	return "", errs.BadInputf("inference: finish %+v: expected stop or length", g.Finish)
}

// CaptureRouting validates one turn's routed experts, the T−1 rows the
// engine returns for positions [from, to) (to = prompt + output − 1: the last
// sampled token has not been forwarded and has none), and returns the MoE
// layers' rows only, as the trajectory stores them: every row present,
// top-k as config.json says, expert IDs in range, no all-zero MoE layer
// (dense layers, zero-filled by SGLang, are dropped, not checked). Anything
// else is RoutingMissing.
func CaptureRouting(g *inference.Generation, f inference.ModelFacts, from, to int) ([]int32, error) {
	if g.Routing == nil {
		return nil, errs.RoutingMissingf("routed_experts missing from the response")
	}
	if g.Routing.Start != from {
		return nil, errs.RoutingMissingf("routing starts at position %d, asked from %d", g.Routing.Start, from)
	}
	r, rows, err := g.Routing.MoERows(f)
	if err != nil {
		return nil, errs.RoutingMissingf("%v", err)
	}
	if rows != to-from {
		return nil, errs.RoutingMissingf("routing has %d rows, expected %d (positions [%d, %d): the last sampled token has none)", rows, to-from, from, to)
	}
	layers, k := len(f.MoELayers), f.TopK
	per := layers * k
	nonzero := make([]bool, layers)
	for i, e := range r {
		if e < 0 || int(e) >= f.Experts {
			return nil, errs.RoutingMissingf("expert ID %d at position %d is outside [0, %d)", e, from+i/per, f.Experts)
		}
		if e != 0 {
			nonzero[(i%per)/k] = true
		}
	}
	if rows > 1 || k > 1 {
		for l, ok := range nonzero {
			if !ok {
				return nil, errs.RoutingMissingf("MoE layer %d is all zero across %d positions (capture failed)", f.MoELayers[l], rows)
			}
		}
	}
	return r, nil
}

// ReroutedPositions counts the positions whose experts differ between two
// routings of the same positions ([positions, layers, top_k] flattened): a
// position counts once if any layer chose another set of experts (order
// within top-k does not matter).
func ReroutedPositions(held, now []int32, layers, topK int) int {
	per := layers * topK
	n := 0
	for p := 0; p+per <= len(held) && p+per <= len(now); p += per {
		for l := 0; l < layers; l++ {
			a, b := held[p+l*topK:p+(l+1)*topK], now[p+l*topK:p+(l+1)*topK]
			if !sameSet(a, b) {
				n++
				break
			}
		}
	}
	return n
}

func sameSet(a, b []int32) bool {
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return len(a) == len(b)
}
