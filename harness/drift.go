package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// HashTokens fingerprints a prompt, so the drift audit can check it later
// without keeping every prompt.
func HashTokens(ts []int32) string {
	h := sha256.New()
	for _, t := range ts {
		fmt.Fprintf(h, "%d,", t)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// DriftReport is the TITO audit of one trajectory.
type DriftReport struct {
	// PromptMismatches counts turns whose prompt did not extend the previous
	// prompt plus its sampled tokens exactly.
	PromptMismatches int `json:"prompt_mismatches"`
	// LossMismatches counts loss-region tokens that differ from the sampled IDs.
	LossMismatches int `json:"loss_mismatches"`
	// ReencodedContextShare is the share of context tokens that came from
	// re-encoding model text (0 unless context was compacted).
	ReencodedContextShare float64 `json:"reencoded_context_share"`
	Drift                 float64 `json:"drift"` // loss mismatches / loss tokens
}

// Turn is what the drift audit reads of one recorded turn.
type Turn struct {
	PromptLen  int     // 0: no generation this turn
	PromptHash string  // HashTokens of the prompt sent
	Sampled    []int32 // the sampler's output IDs, verbatim
}

// AuditDrift checks TITO over the first n positions of a trajectory: every
// turn's prompt is exactly the tokens recorded before it, and the loss region
// is exactly the sampled IDs.
func AuditDrift(tokens []int32, mask []uint8, turns []Turn, n int) DriftReport {
	var d DriftReport
	var sampled []int32
	for _, s := range turns {
		if s.PromptLen == 0 {
			continue // no generation this turn (context exhausted)
		}
		if s.PromptLen > len(tokens) || HashTokens(tokens[:s.PromptLen]) != s.PromptHash {
			d.PromptMismatches++
		}
		sampled = append(sampled, s.Sampled...)
	}
	var loss []int32
	for i := 0; i < n; i++ {
		if mask[i] == 1 {
			loss = append(loss, tokens[i])
		}
	}
	for i := range max(len(loss), len(sampled)) {
		if i >= len(loss) || i >= len(sampled) || loss[i] != sampled[i] {
			d.LossMismatches++
		}
	}
	if len(loss) > 0 {
		d.Drift = float64(d.LossMismatches) / float64(len(loss))
	}
	// Observations and glue are tokenized from their own text, never from
	// decoded model output: nothing is re-encoded.
	d.ReencodedContextShare = 0
	return d
}
