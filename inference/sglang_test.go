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

// stockSGLang answers as stock SGLang's HTTP server does. Each piece follows
// SGLang's source (python/sglang/srt/, main as of 2026-07):
//   - entrypoints/http_server.py: /generate; /model_info (model_path,
//     tokenizer_path, is_generation, weight_version, model_type, ...) with
//     /get_model_info deprecated to it; /server_info = ServerArgs fields
//     (context_length, enable_return_routed_experts, weight_version, ...)
//     merged with scheduler info; /update_weights_from_disk answering
//     {success, message, num_paused_requests}, HTTP 400 when success is false;
//     errors of /generate as {"error": {"message"}} with HTTP 400.
//   - managers/io_struct.py: GenerateReqInput.routed_experts_start_len, "the
//     response covers [routed_experts_start_len, seqlen - 1); must be in
//     [0, prompt_tokens]"; UpdateWeightFromDiskReqInput.weight_version.
//   - layers/moe/routed_experts_capturer.py: the capture buffer is
//     [tokens, num_hidden_layers, num_experts_per_tok] int32, zeros, written
//     per MoE layer only (dense layers stay zero).
//   - managers/tokenizer_manager.py: meta_info.routed_experts = base64 of the
//     int32 array's bytes (little-endian, C order).
//   - managers/schedule_batch.py: finish_reason to_json: {"type": "stop",
//     "matched": id|str}, {"type": "length", "length": n}, {"type": "abort",
//     "message", "status_code", "err_type"}; orjson writes a NaN log-prob as null.
type stockSGLang struct {
	layers, topK, experts int
	moe                   map[int]bool
	version               string
	oldRoutes             bool   // only /get_model_info and /get_server_info (older servers)
	finish                string // "", "abort", "nan"
	captureFlag           bool
	failLoad              bool
}

// expertsAt is the fake router: two distinct experts per (position, layer).
func (s *stockSGLang) expertsAt(pos, layer int) []int32 {
	out := make([]int32, s.topK)
	for k := range out {
		out[k] = int32((pos + 2*layer + k) % s.experts)
	}
	return out
}

func (s *stockSGLang) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	modelInfo := map[string]any{"model_path": "/models/m", "tokenizer_path": "/models/m", "is_generation": true,
		"preferred_sampling_params": nil, "weight_version": s.version, "model_type": "qwen3_moe", "architectures": []string{"Qwen3MoeForCausalLM"}}
	serverInfo := map[string]any{"model_path": "/models/m", "context_length": 2048, "enable_return_routed_experts": s.captureFlag,
		"weight_version": s.version, "max_total_num_tokens": 100000, "internal_states": []any{}, "version": "0.5.15"}
	switch p := r.URL.Path; {
	case p == "/health":
		w.WriteHeader(200)
	case p == "/model_info" && !s.oldRoutes, p == "/get_model_info":
		reply(200, modelInfo)
	case p == "/server_info" && !s.oldRoutes, p == "/get_server_info":
		reply(200, serverInfo)
	case p == "/update_weights_from_disk":
		var in struct {
			ModelPath     string  `json:"model_path"`
			WeightVersion *string `json:"weight_version"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		if s.failLoad {
			reply(400, map[string]any{"success": false, "message": "Failed to get weights iterator: " + in.ModelPath, "num_paused_requests": 0})
			return
		}
		if in.WeightVersion != nil {
			s.version = *in.WeightVersion
		}
		reply(200, map[string]any{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0})
	case p == "/generate":
		s.generate(w, r, reply)
	default:
		reply(404, map[string]any{"detail": "Not Found"})
	}
}

func (s *stockSGLang) generate(w http.ResponseWriter, r *http.Request, reply func(int, any)) {
	var in struct {
		InputIDs []int           `json:"input_ids"`
		RawSP    json.RawMessage `json:"sampling_params"`
		SP       struct {
			Temperature  float64 `json:"temperature"`
			TopP         float64 `json:"top_p"`
			MaxNewTokens int     `json:"max_new_tokens"`
			Stop         []int   `json:"stop_token_ids"`
			Seed         *int64  `json:"sampling_seed"`
		} `json:"-"`
		ReturnLogprob bool `json:"return_logprob"`
		ReturnRouted  bool `json:"return_routed_experts"`
		Start         int  `json:"routed_experts_start_len"`
	}
	json.NewDecoder(r.Body).Decode(&in)
	// SamplingParams(**sampling_params): an unknown key is a TypeError, a 400.
	dec := json.NewDecoder(strings.NewReader(string(in.RawSP)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in.SP); err != nil && len(in.RawSP) > 0 {
		reply(400, map[string]any{"error": map[string]any{"message": "SamplingParams.__init__() got an unexpected keyword argument: " + err.Error()}})
		return
	}
	if in.Start < 0 || in.Start > len(in.InputIDs) {
		reply(400, map[string]any{"error": map[string]any{"message": fmt.Sprintf("routed_experts_start_len=%d must be in [0, %d]", in.Start, len(in.InputIDs))}})
		return
	}
	out := []int{}
	for i := 0; i < in.SP.MaxNewTokens; i++ {
		out = append(out, 10+i)
	}
	finish := map[string]any{"type": "length", "length": in.SP.MaxNewTokens}
	if len(in.SP.Stop) > 0 && in.SP.MaxNewTokens > 1 {
		out[len(out)-1] = in.SP.Stop[0]
		finish = map[string]any{"type": "stop", "matched": in.SP.Stop[0]}
	}
	if s.finish == "abort" {
		finish = map[string]any{"type": "abort", "message": "Abort before prefill", "status_code": 500, "err_type": nil}
	}
	meta := map[string]any{"id": "r1", "prompt_tokens": len(in.InputIDs), "completion_tokens": len(out), "cached_tokens": 0,
		"finish_reason": finish, "weight_version": s.version, "e2e_latency": 0.01}
	if in.ReturnLogprob {
		lps := [][]any{}
		for i, t := range out {
			var lp any = -0.5 - float64(i)
			if s.finish == "nan" && i == 1 {
				lp = nil
			}
			lps = append(lps, []any{lp, t, nil})
		}
		meta["output_token_logprobs"] = lps
	}
	if in.ReturnRouted {
		seq := len(in.InputIDs) + len(out)
		var b []byte
		for pos := in.Start; pos < seq-1; pos++ {
			for l := 0; l < s.layers; l++ {
				for k := 0; k < s.topK; k++ {
					v := int32(0)
					if s.moe[l] {
						v = s.expertsAt(pos, l)[k]
					}
					b = binary.LittleEndian.AppendUint32(b, uint32(v))
				}
			}
		}
		meta["routed_experts"] = base64.StdEncoding.EncodeToString(b)
	}
	reply(200, map[string]any{"text": "xyz", "output_ids": out, "meta_info": meta})
}

func newStockSGLang(t *testing.T, s *stockSGLang) Engine {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	e, err := NewEngine(EngineSGLang, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// facts of the fake: 4 layers, 1 and 3 MoE (as decoder_sparse_step 2).
var fakeFacts = ModelFacts{Layers: 4, MoELayers: []int{1, 3}, Experts: 8, TopK: 2, Vocab: 100}

func defaultSGLang() *stockSGLang {
	return &stockSGLang{layers: 4, topK: 2, experts: 8, moe: map[int]bool{1: true, 3: true}, version: "default", captureFlag: true}
}

func TestSGLangRoutingRowsAreTMinusOne(t *testing.T) {
	s := defaultSGLang()
	e := newStockSGLang(t, s)
	prompt := []int{1, 2, 3, 4, 5}
	for _, start := range []int{0, 3, 5} {
		g, err := e.Generate(context.Background(), Request{InputIDs: prompt, MaxNewTokens: 3, Logprobs: true, Routing: true, RoutingStart: start})
		if err != nil {
			t.Fatal(err)
		}
		ids, rows, err := g.Routing.MoERows(fakeFacts)
		if err != nil {
			t.Fatal(err)
		}
		// Positions [start, prompt+output-1): the last sampled token has no row.
		if want := len(prompt) + len(g.OutputIDs) - 1 - start; rows != want || g.Routing.Start != start {
			t.Fatalf("start %d: %d rows from %d, want %d from %d", start, rows, g.Routing.Start, want, start)
		}
		for p := 0; p < rows; p++ {
			for j, l := range fakeFacts.MoELayers {
				got := ids[(p*2+j)*2 : (p*2+j)*2+2]
				if want := s.expertsAt(start+p, l); !reflect.DeepEqual(got, want) {
					t.Fatalf("start %d: row %d (position %d) layer %d: %v, want %v", start, p, start+p, l, got, want)
				}
			}
		}
	}
}

func TestSGLangStartLenOutsidePromptIs400(t *testing.T) {
	e := newStockSGLang(t, defaultSGLang())
	_, err := e.Generate(context.Background(), Request{InputIDs: []int{1, 2}, MaxNewTokens: 2, Routing: true, RoutingStart: 3})
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), "routed_experts_start_len=3") || Retryable(err) {
		t.Fatalf("err %v: want a non-retryable 400 carrying SGLang's message", err)
	}
}

func TestSGLangFinishReasons(t *testing.T) {
	e := newStockSGLang(t, defaultSGLang())
	g, err := e.Generate(context.Background(), Request{InputIDs: []int{1}, MaxNewTokens: 3, StopTokenIDs: []int{7}, Logprobs: true})
	if err != nil || g.Finish.Kind != FinishStop || g.Finish.MatchedToken == nil || *g.Finish.MatchedToken != 7 {
		t.Fatalf("stop: %+v %v", g, err)
	}
	if len(g.Logprobs) != 3 || g.Logprobs[1] != -1.5 || g.LogprobIDs[2] != 7 || g.WeightVersion != "default" {
		t.Fatalf("log-probs %v ids %v version %q", g.Logprobs, g.LogprobIDs, g.WeightVersion)
	}
	seed := int64(3)
	g, err = e.Generate(context.Background(), Request{InputIDs: []int{1}, MaxNewTokens: 2, Seed: &seed, TopP: 0.9})
	if err != nil || g.Finish.Kind != FinishLength {
		t.Fatalf("length: %+v %v", g, err)
	}
	for _, fin := range []string{"abort", "nan"} {
		s := defaultSGLang()
		s.finish = fin
		_, err := newStockSGLang(t, s).Generate(context.Background(), Request{InputIDs: []int{1}, MaxNewTokens: 3, Logprobs: true})
		var ab *AbortError
		if !errors.As(err, &ab) || ab.Engine != EngineSGLang {
			t.Fatalf("%s: err %v, want an *AbortError", fin, err)
		}
	}
}

func TestSGLangWeightVersionAndReload(t *testing.T) {
	s := defaultSGLang()
	e := newStockSGLang(t, s)
	ctx := context.Background()
	if err := e.UpdateWeights(ctx, "/ck/v3", "v3"); err != nil {
		t.Fatal(err)
	}
	g, err := e.Generate(ctx, Request{InputIDs: []int{1}, MaxNewTokens: 1})
	if err != nil || g.WeightVersion != "v3" {
		t.Fatalf("after reload with weight_version v3 the server reports %q (%v)", g.WeightVersion, err)
	}
	info, err := e.Info(ctx)
	if err != nil || info.WeightVersion != "v3" || info.ContextLen != 2048 || info.RoutingCapture == nil || !*info.RoutingCapture {
		t.Fatalf("info %+v %v", info, err)
	}
	s.failLoad = true
	err = e.UpdateWeights(ctx, "/ck/v4", "v4")
	if err == nil || !strings.Contains(err.Error(), "Failed to get weights iterator: /ck/v4") {
		t.Fatalf("failed load: %v", err)
	}
}

func TestSGLangDeprecatedInfoRoutes(t *testing.T) {
	s := defaultSGLang()
	s.oldRoutes, s.captureFlag = true, false
	info, err := newStockSGLang(t, s).Info(context.Background())
	if err != nil || info.ModelPath != "/models/m" || info.RoutingCapture == nil || *info.RoutingCapture {
		t.Fatalf("info from /get_model_info and /get_server_info: %+v %v", info, err)
	}
}

func TestLaunchFlagsNameTheMissingFlag(t *testing.T) {
	on, off := true, false
	cases := []struct {
		kind string
		info ServerInfo
		r3   bool
		want string
	}{
		{EngineSGLang, ServerInfo{RoutingCapture: &off, CaptureFlag: "--enable-return-routed-experts"}, true, "--enable-return-routed-experts"},
		{EngineVLLM, ServerInfo{}, true, "VLLM_SERVER_DEV_MODE=1"},
		{EngineSGLang, ServerInfo{CaptureFlag: "--enable-return-routed-experts"}, true, "does not report"},
	}
	for _, c := range cases {
		if err := CheckLaunchFlags(c.kind, c.info, c.r3); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: %v, want an error naming %q", c.kind, c.info, err, c.want)
		}
	}
	if err := CheckLaunchFlags(EngineSGLang, ServerInfo{RoutingCapture: &on}, true); err != nil {
		t.Error(err)
	}
	if err := CheckLaunchFlags(EngineVLLM, ServerInfo{RoutingCapture: &off}, false); err != nil {
		t.Errorf("a dense policy (R3 off) needs no capture: %v", err)
	}
	// Against the fakes: SGLang launched without the flag is refused.
	s := defaultSGLang()
	s.captureFlag = false
	info, err := newStockSGLang(t, s).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckLaunchFlags(EngineSGLang, info, true); err == nil || !strings.Contains(err.Error(), "enable_return_routed_experts") {
		t.Errorf("SGLang without capture: %v", err)
	}
}
