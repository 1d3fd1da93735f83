// Package trajectory encodes the training record of one rollout: the token
// IDs the sampler emitted (never re-encoded), the loss mask, the sampler's
// log-probs, and the routed experts at every MoE layer of every position the
// engine forwarded: T−1 rows, as SGLang and vLLM return them (the last
// sampled token was never forwarded; the training forward over tokens[:-1]
// needs exactly these).
package trajectory

import (
	"bytes"
	"fmt"

	"github.com/t1flow/t1flow/internal/safetensors"
)

// Record is one trajectory in memory.
type Record struct {
	Tokens   []int32   // every position: context and generated
	LossMask []uint8   // 1 where the policy generated the token
	Logprobs []float32 // the sampler's log-prob of each generated token, 0 elsewhere
	// Routing is [len(Tokens)-1, Layers, TopK] expert IDs, flattened, Layers
	// being the MoE layers only (config.json says which); nil for SFT data
	// and dense models.
	Routing      []int32
	Layers, TopK int
	Experts      int
	Meta         map[string]string
}

// Encode writes the record as safetensors. Routed experts use the smallest
// unsigned type that holds the expert count (U8 up to 256 experts, else U16).
func (r *Record) Encode() ([]byte, error) {
	n := len(r.Tokens)
	if len(r.LossMask) != n || len(r.Logprobs) != n {
		return nil, fmt.Errorf("trajectory: tokens (%d), loss mask (%d) and logprobs (%d) differ in length", n, len(r.LossMask), len(r.Logprobs))
	}
	ts := map[string]safetensors.Tensor{
		"tokens":    safetensors.Int32s(r.Tokens, n),
		"loss_mask": safetensors.Uint8s(r.LossMask, n),
		"logprobs":  safetensors.Float32s(r.Logprobs, n),
	}
	if r.Routing != nil {
		per := r.Layers * r.TopK
		if per == 0 || len(r.Routing)%per != 0 {
			return nil, fmt.Errorf("trajectory: %d routing entries do not divide into [positions, %d, %d]", len(r.Routing), r.Layers, r.TopK)
		}
		p := len(r.Routing) / per
		if p != n-1 {
			return nil, fmt.Errorf("trajectory: routing has %d rows for %d tokens; it must have T−1 = %d (the last sampled token has none)", p, n, n-1)
		}
		switch {
		case r.Experts <= 256:
			b := make([]uint8, len(r.Routing))
			for i, e := range r.Routing {
				if e < 0 || int(e) >= r.Experts {
					return nil, fmt.Errorf("trajectory: expert ID %d outside [0, %d)", e, r.Experts)
				}
				b[i] = uint8(e)
			}
			ts["routed_experts"] = safetensors.Uint8s(b, p, r.Layers, r.TopK)
		case r.Experts <= 65536:
			b := make([]byte, 2*len(r.Routing))
			for i, e := range r.Routing {
				if e < 0 || int(e) >= r.Experts {
					return nil, fmt.Errorf("trajectory: expert ID %d outside [0, %d)", e, r.Experts)
				}
				b[2*i], b[2*i+1] = byte(e), byte(e>>8)
			}
			ts["routed_experts"] = safetensors.Tensor{DType: "U16", Shape: []int{p, r.Layers, r.TopK}, Data: b}
		default:
			return nil, fmt.Errorf("trajectory: %d experts is more than U16 holds", r.Experts)
		}
	}
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, ts, r.Meta); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
