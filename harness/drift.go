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
	// PromptMismatches counts turns whose prompt, as sent to the sampler and
	// as the sampler counted it (meta_info.prompt_tokens), is not exactly the
	// trajectory's tokens before that turn.
	PromptMismatches int `json:"prompt_mismatches"`
	// LossMismatches counts positions where the trajectory's loss region is
	// not what the sampler returned: a sampled ID missing or changed, a
	// loss-mask bit on a token the sampler did not emit or off one it did, a
	// log-prob other than the sampler's, or output_ids that disagree with
	// meta_info (completion_tokens, the IDs in output_token_logprobs).
	LossMismatches int `json:"loss_mismatches"`
	// ReencodedContextShare is the share of the context tokens that a
	// text-in harness would get wrong: the rendered conversation re-encoded
	// and compared with the assembled tokens (the paper reports 2.6%; TITO
	// trains on the assembled tokens, so this measures what it avoids).
	ReencodedContextShare float64 `json:"reencoded_context_share"`
	Drift                 float64 `json:"drift"` // loss mismatches / loss tokens
}

// Turn is what the sampler was sent and returned in one turn, recorded
// apart from the assembled trajectory.
type Turn struct {
	PromptLen  int    // 0: no generation this turn
	PromptHash string // HashTokens of the input_ids sent
	// From the response: output_ids verbatim, meta_info's counts, the token
	// IDs and log-probs of output_token_logprobs.
	Sampled          []int32
	MetaPrompt       int
	MetaCompletion   int
	LogprobIDs       []int32
	SampledLogprobs  []float32
	CheckSamplerMeta bool // false for turns recorded before meta_info was kept
}

// AuditDrift checks TITO over the first n positions of an assembled
// trajectory against what the sampler was sent and returned: every turn's
// prompt is exactly the tokens before it, and each turn's output sits right
// after its prompt, in the loss mask, with the sampler's log-probs; no other
// position is in the loss mask.
func AuditDrift(tokens []int32, mask []uint8, logprobs []float32, turns []Turn, n int) DriftReport {
	var d DriftReport
	inLoss := make([]bool, n)
	for _, s := range turns {
		if s.PromptLen == 0 {
			continue // no generation this turn (context exhausted)
		}
		if s.PromptLen > n || HashTokens(tokens[:s.PromptLen]) != s.PromptHash || (s.CheckSamplerMeta && s.MetaPrompt != s.PromptLen) {
			d.PromptMismatches++
		}
		if s.CheckSamplerMeta && (s.MetaCompletion != len(s.Sampled) || !equal(s.LogprobIDs, s.Sampled) || len(s.SampledLogprobs) != len(s.Sampled)) {
			d.LossMismatches++
		}
		for j, id := range s.Sampled {
			p := s.PromptLen + j
			if p >= n {
				d.LossMismatches++
				continue
			}
			inLoss[p] = true
			lpOK := !s.CheckSamplerMeta || j >= len(s.SampledLogprobs) || logprobs[p] == s.SampledLogprobs[j]
			if tokens[p] != id || mask[p] != 1 || !lpOK {
				d.LossMismatches++
			}
		}
	}
	loss := 0
	for i := 0; i < n; i++ {
		if mask[i] == 1 {
			loss++
			if !inLoss[i] {
				d.LossMismatches++ // trained on a token the sampler did not emit
			}
		}
	}
	if loss > 0 {
		d.Drift = float64(d.LossMismatches) / float64(loss)
	}
	return d
}

// ReencodedTokens counts the tokens of each assembled stretch (a turn's
// tokens) that differ from a re-encoding of the same stretch's rendered
// text: everything between the longest common prefix and suffix.
func ReencodedTokens(assembled, reencoded [][]int32) (differ, total int) {
	for i, a := range assembled {
		total += len(a)
		if i >= len(reencoded) {
			differ += len(a)
			continue
		}
		b := reencoded[i]
		p := 0
		for p < len(a) && p < len(b) && a[p] == b[p] {
			p++
		}
		s := 0
		for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
			s++
		}
		differ += max(len(a)-p-s, 0)
		if len(a)-p-s == 0 && len(b) != len(a) {
			differ++ // re-encoding added tokens: at least one position shifts
		}
	}
	return differ, total
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
