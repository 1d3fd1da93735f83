// Package inference is the model client side of rollouts: clients of stock
// inference engines as they ship (SGLang's native API, vLLM's token-in
// token-out API) and of t1flow's own test servers, behind one Engine
// interface (token IDs in and out, log-probs, routed experts, weight
// versions, reloads); a pool that spreads rollouts over replicas; model facts
// from the checkpoint's config.json; and an OpenAI-compatible chat client for
// hosted models.
package inference

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/t1flow/t1flow/internal/httpjson"
)

// Client is the HTTP side of one server: SGLang's native API, which t1flow's
// own servers speak too, and the base the other engines' clients build on.
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

// SamplingParams are SGLang's sampling_params.
type SamplingParams struct {
	Temperature  float64 `json:"temperature"`
	TopP         float64 `json:"top_p,omitempty"`
	MaxNewTokens int     `json:"max_new_tokens"`
	StopTokenIDs []int   `json:"stop_token_ids,omitempty"`
	Seed         *int64  `json:"seed,omitempty"`          // t1flow's servers
	SamplingSeed *int64  `json:"sampling_seed,omitempty"` // stock SGLang's name
}

// GenerateRequest is the /generate body.
type GenerateRequest struct {
	InputIDs              []int          `json:"input_ids"`
	SamplingParams        SamplingParams `json:"sampling_params"`
	ReturnLogprob         bool           `json:"return_logprob"`
	ReturnRoutedExperts   bool           `json:"return_routed_experts"`
	RoutedExpertsStartLen int            `json:"routed_experts_start_len"`
}

// GenerateResponse is the /generate answer.
type GenerateResponse struct {
	Text      string `json:"text"`
	OutputIDs []int  `json:"output_ids"`
	MetaInfo  struct {
		PromptTokens        int            `json:"prompt_tokens"`
		CachedTokens        int            `json:"cached_tokens"` // prompt positions reused from the prefix cache
		CompletionTokens    int            `json:"completion_tokens"`
		FinishReason        map[string]any `json:"finish_reason"`
		OutputTokenLogprobs [][3]any       `json:"output_token_logprobs"`
		RoutedExperts       string         `json:"routed_experts"`
		RoutedStart         *int           `json:"routed_experts_start_len"` // echoed by some versions
		WeightVersion       string         `json:"weight_version"`
	} `json:"meta_info"`
}

// Logprobs returns the sampler's log-prob of each output token.
func (r *GenerateResponse) Logprobs() ([]float32, error) {
	out := make([]float32, len(r.MetaInfo.OutputTokenLogprobs))
	for i, e := range r.MetaInfo.OutputTokenLogprobs {
		f, ok := e[0].(float64)
		if !ok {
			// orjson writes NaN as null: a NaN log-prob is an abort.
			return nil, &AbortError{Engine: "sglang", Reason: fmt.Sprintf("output_token_logprobs[%d] is %v, not a number (NaN logits)", i, e[0])}
		}
		out[i] = float32(f)
	}
	return out, nil
}

// LogprobTokenIDs returns the token ID of each output_token_logprobs entry,
// which must be output_ids (a check of the response, for the drift audit).
func (r *GenerateResponse) LogprobTokenIDs() ([]int32, error) {
	out := make([]int32, len(r.MetaInfo.OutputTokenLogprobs))
	for i, e := range r.MetaInfo.OutputTokenLogprobs {
		f, ok := e[1].(float64)
		if !ok {
			return nil, fmt.Errorf("output_token_logprobs[%d]: token ID %v is not a number", i, e[1])
		}
		out[i] = int32(f)
	}
	return out, nil
}

// RoutedExperts decodes meta_info.routed_experts (base64 int32, [positions, layers, top_k]).
func (r *GenerateResponse) RoutedExperts() ([]int32, error) {
	if r.MetaInfo.RoutedExperts == "" {
		return nil, fmt.Errorf("routed_experts missing from the response")
	}
	b, err := base64.StdEncoding.DecodeString(r.MetaInfo.RoutedExperts)
	if err != nil {
		return nil, fmt.Errorf("routed_experts: %w", err)
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("routed_experts: %d bytes is not a whole number of int32", len(b))
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// ModelInfo is /get_model_info.
type ModelInfo struct {
	ModelPath     string         `json:"model_path"`
	WeightVersion string         `json:"weight_version"`
	NumLayers     int            `json:"num_layers"`
	NumExperts    int            `json:"num_experts"`
	TopK          int            `json:"top_k"`
	VocabSize     int            `json:"vocab_size"`
	BlockSize     int            `json:"block_size"`
	SpecialTokens map[string]int `json:"special_tokens"`
	SampleDtype   string         `json:"sample_dtype"`
	// Chat is the policy's chat template as the harness renders it; nil
	// when the server does not report one (SGLang itself does not).
	Chat *ChatTemplate `json:"chat,omitempty"`
	// Config is the checkpoint's config.json as t1flow's servers report it
	// (the model facts' source when no model-files sidecar is named).
	Config json.RawMessage `json:"config,omitempty"`
}

// ChatTemplate is how the policy's turns are glued together, as text the
// server tokenizes: the first prompt is SystemPrefix + system prompt +
// EndOfTurn + TurnSeparator + UserPrefix + observation + EndOfTurn +
// TurnSeparator + AssistantPrefix; the sampler stops on EndOfTurnID.
type ChatTemplate struct {
	SystemPrefix    string `json:"system_prefix"`
	UserPrefix      string `json:"user_prefix"`
	AssistantPrefix string `json:"assistant_prefix"`
	EndOfTurn       string `json:"end_of_turn"`
	EndOfTurnID     *int   `json:"end_of_turn_id"`
	TurnSeparator   string `json:"turn_separator"`
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return httpjson.Call(ctx, hc, method, c.BaseURL+path, path, "", in, out)
}

// Generate samples a continuation.
func (c *Client) Generate(ctx context.Context, req GenerateRequest) (*GenerateResponse, error) {
	var r GenerateResponse
	err := c.do(ctx, http.MethodPost, "/generate", req, &r)
	return &r, err
}

// ModelInfo describes the served model.
func (c *Client) ModelInfo(ctx context.Context) (ModelInfo, error) {
	var m ModelInfo
	err := c.do(ctx, http.MethodGet, "/get_model_info", nil, &m)
	return m, err
}

// UpdateWeightsFromDisk loads a checkpoint directory on the server's host
// (SGLang's /update_weights_from_disk: model_path, weight_version; answer
// {success, message}, HTTP 400 when success is false).
func (c *Client) UpdateWeightsFromDisk(ctx context.Context, dir, version string) error {
	body := map[string]string{"model_path": dir}
	if version != "" {
		body["weight_version"] = version
	}
	var r struct {
		Success *bool  `json:"success"`
		Message string `json:"message"`
	}
	if err := c.do(ctx, http.MethodPost, "/update_weights_from_disk", body, &r); err != nil {
		return err
	}
	if r.Success != nil && !*r.Success {
		return fmt.Errorf("%s/update_weights_from_disk %s: success false: %s", c.BaseURL, dir, r.Message)
	}
	return nil
}

// Health is /health.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/health", nil, nil)
}

// Tokenize encodes text with the server's tokenizer. With splitSpecial
// (Hugging Face's split_special_tokens), special-token text such as
// "<|im_end|>" is encoded as ordinary text: for text from outside the chat
// template (terminal output, model text), which must never become a control
// token. Without it, special tokens are parsed (the template's own glue).
func (c *Client) Tokenize(ctx context.Context, text string, splitSpecial bool) ([]int, error) {
	var r struct {
		Tokens []int `json:"tokens"`
	}
	body := map[string]any{"text": text}
	if splitSpecial {
		body["split_special_tokens"] = true
	}
	err := c.do(ctx, http.MethodPost, "/tokenize", body, &r)
	return r.Tokens, err
}
