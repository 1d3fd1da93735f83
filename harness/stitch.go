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
// (the chat template's EndOfTurnID).
// SGLang reports stop, length or abort: an abort (the sampler gave up on the
// request) is a retryable InfraError, and anything else is an error too,
// never taken for "length", since it would stitch a turn whose end nobody
// knows.
func StitchCase(resp *inference.GenerateResponse, eot int) (string, error) {
	fr := resp.MetaInfo.FinishReason
	switch fr["type"] {
	case "length":
		return StitchLength, nil
	case "stop":
		switch m := fr["matched"].(type) {
		case float64:
			if int(m) == eot {
				return StitchEOT, nil
			}
			return StitchEOS, nil
		case string:
			return StitchStopString, nil
		}
		return "", errs.BadInputf("inference: finish_reason %v: stop without a matched token or string", fr)
	case "abort":
		return "", errs.Infraf("inference aborted the generation: %v", fr["message"])
	}
	return "", errs.BadInputf("inference: unknown finish_reason %v (expected stop, length or abort)", fr)
}

// CaptureRouting validates one turn's routed experts: every position the
// sampler processed since `from`, with the model's layers and top-k, expert
// IDs in range, and no all-zero MoE layer. Anything else is RoutingMissing.
func CaptureRouting(resp *inference.GenerateResponse, info inference.ModelInfo, from, to int) ([]int32, error) {
	r, err := resp.RoutedExperts()
	if err != nil {
		return nil, errs.RoutingMissingf("%v", err)
	}
	per := info.NumLayers * info.TopK
	if per == 0 {
		return nil, errs.RoutingMissingf("model info reports %d layers × top-%d: not an MoE model", info.NumLayers, info.TopK)
	}
	if len(r) != (to-from)*per {
		return nil, errs.RoutingMissingf("routing has %d entries, expected %d positions × %d layers × top-%d = %d", len(r), to-from, info.NumLayers, info.TopK, (to-from)*per)
	}
	nonzero := make([]bool, info.NumLayers)
	for i, e := range r {
		if e < 0 || int(e) >= info.NumExperts {
			return nil, errs.RoutingMissingf("expert ID %d at position %d is outside [0, %d)", e, from+i/per, info.NumExperts)
		}
		if e != 0 {
			nonzero[(i%per)/info.TopK] = true
		}
	}
	if to-from > 1 || info.TopK > 1 {
		for l, ok := range nonzero {
			if !ok {
				return nil, errs.RoutingMissingf("layer %d is all zero across %d positions (capture failed)", l, to-from)
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
