package activities

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
)

// fakeRouter answers /generate with the routing `now` holds for every
// position (1 layer × top-2) the engine forwarded, [routed_experts_start_len,
// len-1) as SGLang returns it, and counts requests.
func fakeRouter(t *testing.T, now []int32, calls *int) *inference.Pool {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*calls++
		var req inference.GenerateRequest
		json.NewDecoder(r.Body).Decode(&req)
		end := len(req.InputIDs) + 1 - 1 // one token generated; it has no row
		b := make([]byte, 0, 4*2*end)
		for _, e := range now[2*req.RoutedExpertsStartLen : 2*end] {
			b = binary.LittleEndian.AppendUint32(b, uint32(e))
		}
		json.NewEncoder(w).Encode(map[string]any{"output_ids": []int{5}, "meta_info": map[string]any{
			"routed_experts": base64.StdEncoding.EncodeToString(b), "finish_reason": map[string]any{"type": "length", "length": 1}}})
	}))
	t.Cleanup(srv.Close)
	p, err := inference.NewPool([]string{srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A later turn whose context the server re-ran (cached_tokens below the
// positions the episode holds routing for) was sampled under routing the
// trajectory does not hold: counted, and above the threshold an abort.
func TestPrefixCacheMissCountsReroutingAndAborts(t *testing.T) {
	held := []int32{0, 1, 2, 3, 1, 2} // 3 positions
	prompt := []int32{7, 7, 7, 7, 7}  // 3 held positions, then 2 of glue
	ep := func() *episode {
		return &episode{tokenContext: &tokenContext{covered: 3, routing: append([]int32{}, held...)}, facts: &inference.ModelFacts{Layers: 1, MoELayers: []int{0}, TopK: 2, Experts: 4}}
	}
	agent := AgentSpec{Temperature: 1}
	ctx := context.Background()

	calls := 0
	same := append(append([]int32{}, held...), 0, 1, 0, 1, 0, 1)
	seg := segment{}
	if err := ep().checkRerouting(ctx, fakeRouter(t, same, &calls), "s", agent, &seg, prompt, 3); err != nil || calls != 0 || seg.Recomputed != 0 {
		t.Fatalf("a cache hit needs no check: %v, %d calls, %+v", err, calls, seg)
	}
	if err := ep().checkRerouting(ctx, fakeRouter(t, same, &calls), "s", agent, &seg, prompt, 0); err != nil || seg.Recomputed != 3 || seg.Rerouted != 0 {
		t.Fatalf("a miss that re-routed alike: %v %+v", err, seg)
	}
	moved := append([]int32{}, same...)
	moved[2], moved[3] = 0, 3 // position 1 chose experts {0, 3} instead of {2, 3}
	seg = segment{}
	err := ep().checkRerouting(ctx, fakeRouter(t, moved, &calls), "s", agent, &seg, prompt, 0)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.RoutingMissing || seg.Rerouted != 1 || seg.Recomputed != 3 {
		t.Fatalf("re-routed context: %v %+v", err, seg)
	}
	agent.MaxRerouted = 0.5 // 1 of 3 allowed
	if err := ep().checkRerouting(ctx, fakeRouter(t, moved, &calls), "s", agent, &seg, prompt, 0); err != nil || seg.Rerouted != 1 {
		t.Fatalf("under the threshold: %v %+v", err, seg)
	}
}
