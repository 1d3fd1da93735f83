package inference

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// VLLM is stock vLLM's token-in token-out API as it ships
// (docs/trainer-protocol.md, "Inference engines"): POST /inference/v1/generate
// (served with --enable-scale-out), GET /v1/models, GET /server_info,
// POST /collective_rpc, POST /update_weight_version and GET /weight_info
// (the last four with VLLM_SERVER_DEV_MODE=1), GET /health.
type VLLM struct {
	*Client

	mu     sync.Mutex
	loaded string // the weight version this client last loaded and verified
}

// Kind is EngineVLLM.
func (v *VLLM) Kind() string { return EngineVLLM }

// URL is the server's base URL.
func (v *VLLM) URL() string { return v.BaseURL }

type vllmSampling struct {
	Temperature  float64 `json:"temperature"`
	TopP         float64 `json:"top_p,omitempty"`
	MaxTokens    int     `json:"max_tokens"`
	StopTokenIDs []int   `json:"stop_token_ids,omitempty"`
	Seed         *int64  `json:"seed,omitempty"`
	Logprobs     *int    `json:"logprobs,omitempty"` // 0: the sampled token's log-prob only
	// RoutedPromptStart drops the routing rows of leading prompt positions.
	RoutedPromptStart int  `json:"routed_experts_prompt_start,omitempty"`
	SkipSpecial       bool `json:"skip_special_tokens"`
}

type vllmRequest struct {
	TokenIDs       []int        `json:"token_ids"`
	SamplingParams vllmSampling `json:"sampling_params"`
}

// vllmLogprobs is vLLM's ChatCompletionLogProbs (choices[0].logprobs).
type vllmLogprobs struct {
	Content []struct {
		Token   string   `json:"token"`
		Logprob *float64 `json:"logprob"`
	} `json:"content"`
}

type vllmResponse struct {
	Choices []struct {
		TokenIDs      []int         `json:"token_ids"`
		Logprobs      *vllmLogprobs `json:"logprobs"`
		FinishReason  *string       `json:"finish_reason"`
		RoutedExperts *string       `json:"routed_experts"`
		Text          string        `json:"text"`
		// WeightVersions: which weight version sampled which output tokens.
		WeightVersions []vllmSpan `json:"weight_versions"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		Details          *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// vllmSpan is vLLM's WeightVersionSpan: output tokens [start, end) were
// sampled by the weights labelled version (the engine's label, "default" at
// launch, set by POST /update_weight_version).
type vllmSpan struct {
	Version string `json:"version"`
	Start   int    `json:"start"`
	End     int    `json:"end"`
}

// Generate runs /inference/v1/generate.
func (v *VLLM) Generate(ctx context.Context, req Request) (*Generation, error) {
	sp := vllmSampling{Temperature: req.Temperature, TopP: req.TopP, MaxTokens: req.MaxNewTokens, StopTokenIDs: req.StopTokenIDs, Seed: req.Seed}
	if req.Logprobs {
		zero := 0
		sp.Logprobs = &zero
	}
	if req.Routing {
		sp.RoutedPromptStart = req.RoutingStart
	}
	var r vllmResponse
	if err := v.do(ctx, http.MethodPost, "/inference/v1/generate", vllmRequest{TokenIDs: req.InputIDs, SamplingParams: sp}, &r); err != nil {
		return nil, err
	}
	return v.normalise(&r, req)
}

func (v *VLLM) normalise(r *vllmResponse, req Request) (*Generation, error) {
	if len(r.Choices) != 1 {
		return nil, fmt.Errorf("inference vllm: %d choices, expected 1", len(r.Choices))
	}
	c := r.Choices[0]
	g := &Generation{Text: c.Text, OutputIDs: c.TokenIDs, Completion: len(c.TokenIDs), WeightVersion: v.version(c.WeightVersions)}
	if r.Usage != nil {
		g.PromptTokens, g.Completion = r.Usage.PromptTokens, r.Usage.CompletionTokens
		if r.Usage.Details != nil {
			g.CachedTokens = r.Usage.Details.CachedTokens
		}
	}
	fr := ""
	if c.FinishReason != nil {
		fr = *c.FinishReason
	}
	switch fr {
	case "stop":
		g.Finish.Kind = FinishStop
		// vLLM keeps a stop token in token_ids and does not name it.
		if n := len(c.TokenIDs); n > 0 && contains(req.StopTokenIDs, c.TokenIDs[n-1]) {
			t := c.TokenIDs[n-1]
			g.Finish.MatchedToken = &t
		}
	case "length":
		g.Finish.Kind = FinishLength
	case "abort", "error":
		return nil, &AbortError{Engine: v.Kind(), Reason: "finish_reason " + fr}
	default:
		return nil, fmt.Errorf("inference vllm: unknown finish_reason %q (expected stop, length, abort or error)", fr)
	}
	if req.Logprobs {
		if err := readVLLMLogprobs(g, c.TokenIDs, c.Logprobs); err != nil {
			return nil, err
		}
	}
	if req.Routing && c.RoutedExperts != nil && *c.RoutedExperts != "" {
		rt, err := decodeVLLMRouting(*c.RoutedExperts)
		if err != nil {
			return nil, err
		}
		rt.Start = req.RoutingStart
		g.Routing = rt
	}
	return g, nil
}

// vllmLogprobs reads choices[0].logprobs.content: one entry per output
// token; a missing or non-finite log-prob is an abort.
func readVLLMLogprobs(g *Generation, ids []int, lp *vllmLogprobs) error {
	if lp == nil {
		return fmt.Errorf("inference vllm: choices[0].logprobs is missing (sampling_params.logprobs was sent)")
	}
	g.Logprobs = make([]float32, len(lp.Content))
	g.LogprobIDs = make([]int32, len(lp.Content))
	for i, e := range lp.Content {
		if e.Logprob == nil || math.IsNaN(*e.Logprob) || math.IsInf(*e.Logprob, 1) {
			return &AbortError{Engine: EngineVLLM, Reason: fmt.Sprintf("choices[0].logprobs.content[%d].logprob is not a number", i)}
		}
		g.Logprobs[i] = float32(*e.Logprob)
		// With --return-tokens-as-token-ids the token is "token_id:N"; else it
		// is text, and the ID is the one token_ids holds at that index.
		if id, ok := strings.CutPrefix(e.Token, "token_id:"); ok {
			n, err := strconv.Atoi(id)
			if err != nil {
				return fmt.Errorf("inference vllm: logprobs.content[%d].token %q", i, e.Token)
			}
			g.LogprobIDs[i] = int32(n)
		} else if i < len(ids) {
			g.LogprobIDs[i] = int32(ids[i])
		} else {
			g.LogprobIDs[i] = -1
		}
	}
	return nil
}

// decodeVLLMRouting decodes choices[0].routed_experts: base64 of np.save of
// a [rows, layers, top_k] uint8 (uint16 past 256 experts) array.
func decodeVLLMRouting(s string) (*Routing, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("inference vllm: routed_experts is not base64: %w", err)
	}
	ids, shape, err := decodeNpy(b)
	if err != nil {
		return nil, fmt.Errorf("inference vllm: routed_experts: %w", err)
	}
	if len(shape) != 3 {
		return nil, fmt.Errorf("inference vllm: routed_experts has shape %v, expected [rows, layers, top_k]", shape)
	}
	return &Routing{Rows: shape[0], Layers: shape[1], TopK: shape[2], IDs: ids}, nil
}

// version is the weight version that sampled a generation: its spans'
// version, the versions joined by "+" when a reload came mid-generation (no
// one policy's sample, so never trained as one), else (no output token) the
// version this client last loaded.
func (v *VLLM) version(spans []vllmSpan) string {
	var vs []string
	for _, sp := range spans {
		if len(vs) == 0 || vs[len(vs)-1] != sp.Version {
			vs = append(vs, sp.Version)
		}
	}
	if len(vs) > 0 {
		return strings.Join(vs, "+")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.loaded
}

// UpdateWeights reloads the weights in place through /collective_rpc
// (reload_weights with weights_path; the server needs VLLM_SERVER_DEV_MODE=1).
// reload_weights takes no version: the engine's label is then set with
// /update_weight_version, so every client of the server (the rollouts' too)
// reads it in the generate answers' weight_versions and at /weight_info, and
// a restarted engine reports "default" again. gpu's reload verification
// checks the weights are right.
func (v *VLLM) UpdateWeights(ctx context.Context, dir, version string) error {
	body := map[string]any{"method": "reload_weights", "kwargs": map[string]string{"weights_path": dir}}
	if err := v.do(ctx, http.MethodPost, "/collective_rpc", body, nil); err != nil {
		return err
	}
	// The prefix cache's KV blocks were computed with the weights before:
	// reload_weights keeps them, so a prompt seen before would be continued
	// on the old weights' keys and values. vLLM answers success false while
	// blocks are still held (requests in flight): the reload is not usable yet.
	var reset struct {
		Success *bool `json:"success"`
	}
	if err := v.do(ctx, http.MethodPost, "/reset_prefix_cache", map[string]any{}, &reset); err != nil {
		return err
	}
	if reset.Success != nil && !*reset.Success {
		return fmt.Errorf("vllm %s: /reset_prefix_cache after reloading %s answered success false (KV blocks still in use): the reload is not usable yet", v.BaseURL, dir)
	}
	var set struct {
		Success bool `json:"success"`
	}
	if err := v.do(ctx, http.MethodPost, "/update_weight_version", map[string]string{"new_version": version}, &set); err != nil {
		return err
	}
	if !set.Success {
		return fmt.Errorf("vllm %s: /update_weight_version %s after reloading %s did not answer success", v.BaseURL, version, dir)
	}
	v.SetVersion(version)
	return nil
}

// SetVersion records the weight version the server serves (its launch
// checkpoint's, or a verified reload's).
func (v *VLLM) SetVersion(version string) {
	v.mu.Lock()
	v.loaded = version
	v.mu.Unlock()
}

// Info reads /v1/models (model and max_model_len) and, when the server runs
// in dev mode, /weight_info (the engine's weight-version label) and
// /server_info (its config, for the routed-experts flag).
func (v *VLLM) Info(ctx context.Context) (ServerInfo, error) {
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			Root        string `json:"root"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := v.do(ctx, http.MethodGet, "/v1/models", nil, &models); err != nil {
		return ServerInfo{}, err
	}
	if len(models.Data) == 0 {
		return ServerInfo{}, fmt.Errorf("inference vllm %s: /v1/models lists no model", v.BaseURL)
	}
	m := models.Data[0]
	info := ServerInfo{ModelPath: m.Root, ContextLen: m.MaxModelLen, WeightVersion: v.version(nil),
		CaptureFlag: "--enable-return-routed-experts (model_config.enable_return_routed_experts)"}
	if info.ModelPath == "" {
		info.ModelPath = m.ID
	}
	var wi struct {
		WeightVersion *string `json:"weight_version"`
	}
	if err := v.do(ctx, http.MethodGet, "/weight_info", nil, &wi); err == nil && wi.WeightVersion != nil {
		info.WeightVersion = *wi.WeightVersion // the engine's own label: "default" after a restart
	}
	var si map[string]any
	if err := v.do(ctx, http.MethodGet, "/server_info", nil, &si); err == nil {
		info.RoutingCapture = vllmCaptureFlag(si)
	}
	return info, nil
}

// vllmCaptureFlag finds enable_return_routed_experts in /server_info's
// vllm_config, which vLLM reports as the config's text (field=value) or,
// in some versions, as a JSON object.
func vllmCaptureFlag(si map[string]any) *bool {
	var find func(any) *bool
	find = func(x any) *bool {
		switch t := x.(type) {
		case map[string]any:
			if b, ok := t["enable_return_routed_experts"].(bool); ok {
				return &b
			}
			for _, y := range t {
				if r := find(y); r != nil {
					return r
				}
			}
		case string:
			for _, val := range []string{"True", "true"} {
				if strings.Contains(t, "enable_return_routed_experts="+val) || strings.Contains(t, `"enable_return_routed_experts": `+val) {
					on := true
					return &on
				}
			}
			if strings.Contains(t, "enable_return_routed_experts") {
				off := false
				return &off
			}
		}
		return nil
	}
	return find(si)
}

// Health is /health.
func (v *VLLM) Health(ctx context.Context) error { return v.Client.Health(ctx) }

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
