package sweepstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/t1flow/t1flow/internal/harborout"
	"github.com/t1flow/t1flow/internal/safetensors"
	"github.com/t1flow/t1flow/internal/store"
)

// addTokens puts a policy rollout's sampled tokens and log-probs on its
// steps (ATIF's completion_token_ids and logprobs): each run of generated
// positions (loss mask 1) of the trajectory is one turn's completion, in
// order. When the runs and the turns do not pair up one to one (a turn
// that generated nothing), the steps are left without tokens rather than
// given another turn's.
func addTokens(ctx context.Context, st store.Store, ref store.Ref, steps []harborout.Step) error {
	b, err := st.Get(ctx, ref)
	if err != nil {
		return err
	}
	ts, _, err := safetensors.Read(b)
	if err != nil {
		return err
	}
	tokens, err := ts["tokens"].AsInt32()
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	mask, lp := ts["loss_mask"], ts["logprobs"]
	if mask.DType != "U8" || lp.DType != "F32" || len(mask.Data) != len(tokens) || len(lp.Data) != 4*len(tokens) {
		return fmt.Errorf("loss_mask (%s, %d) and logprobs (%s, %d bytes) do not match %d tokens", mask.DType, len(mask.Data), lp.DType, len(lp.Data), len(tokens))
	}
	type run struct{ start, end int }
	var runs []run
	for i := range tokens {
		switch {
		case mask.Data[i] == 0:
		case len(runs) > 0 && runs[len(runs)-1].end == i:
			runs[len(runs)-1].end++
		default:
			runs = append(runs, run{i, i + 1})
		}
	}
	if len(runs) != len(steps) {
		return nil
	}
	for k, r := range runs {
		for i := r.start; i < r.end; i++ {
			steps[k].TokenIDs = append(steps[k].TokenIDs, int(tokens[i]))
			steps[k].Logprobs = append(steps[k].Logprobs, float64(math.Float32frombits(binary.LittleEndian.Uint32(lp.Data[4*i:]))))
		}
	}
	return nil
}
