package gpu

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
)

// InferenceClient speaks the subset of SGLang's native API that rollouts use.
type InferenceClient struct {
	BaseURL string
	HTTP    *http.Client
}

// SamplingParams are SGLang's sampling_params.
type SamplingParams struct {
	Temperature  float64 `json:"temperature"`
	TopP         float64 `json:"top_p,omitempty"`
	MaxNewTokens int     `json:"max_new_tokens"`
	StopTokenIDs []int   `json:"stop_token_ids,omitempty"`
	Seed         *int64  `json:"seed,omitempty"`
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
		CompletionTokens    int            `json:"completion_tokens"`
		FinishReason        map[string]any `json:"finish_reason"`
		OutputTokenLogprobs [][3]any       `json:"output_token_logprobs"`
		RoutedExperts       string         `json:"routed_experts"`
		WeightVersion       string         `json:"weight_version"`
	} `json:"meta_info"`
}

// Logprobs returns the sampler's log-prob of each output token.
func (r *GenerateResponse) Logprobs() ([]float32, error) {
	out := make([]float32, len(r.MetaInfo.OutputTokenLogprobs))
	for i, e := range r.MetaInfo.OutputTokenLogprobs {
		f, ok := e[0].(float64)
		if !ok {
			return nil, fmt.Errorf("output_token_logprobs[%d]: %v is not a number", i, e[0])
		}
		out[i] = float32(f)
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
}

func (c *InferenceClient) hc() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// Generate samples a continuation.
func (c *InferenceClient) Generate(ctx context.Context, req GenerateRequest) (*GenerateResponse, error) {
	var r GenerateResponse
	err := call(ctx, c.hc(), http.MethodPost, c.BaseURL+"/generate", "/generate", req, &r)
	return &r, err
}

// ModelInfo describes the served model.
func (c *InferenceClient) ModelInfo(ctx context.Context) (ModelInfo, error) {
	var m ModelInfo
	err := call(ctx, c.hc(), http.MethodGet, c.BaseURL+"/get_model_info", "/get_model_info", nil, &m)
	return m, err
}

// UpdateWeightsFromDisk loads a checkpoint directory on the server's host.
func (c *InferenceClient) UpdateWeightsFromDisk(ctx context.Context, dir string) error {
	return call(ctx, c.hc(), http.MethodPost, c.BaseURL+"/update_weights_from_disk", "/update_weights_from_disk", map[string]string{"model_path": dir}, nil)
}

// Health is /health.
func (c *InferenceClient) Health(ctx context.Context) error {
	return call(ctx, c.hc(), http.MethodGet, c.BaseURL+"/health", "/health", nil, nil)
}

// Tokenize encodes text with the server's tokenizer (special tokens allowed).
func (c *InferenceClient) Tokenize(ctx context.Context, text string) ([]int, error) {
	var r struct {
		Tokens []int `json:"tokens"`
	}
	err := call(ctx, c.hc(), http.MethodPost, c.BaseURL+"/tokenize", "/tokenize", map[string]any{"text": text}, &r)
	return r.Tokens, err
}

// ChatMessage is one OpenAI-style chat message.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatClient speaks an OpenAI-compatible /v1/chat/completions endpoint
// (hosted models, eval only: text in and out).
type ChatClient struct {
	BaseURL string // up to, not including, /v1
	Model   string
	APIKey  string
	HTTP    *http.Client
}

// Complete returns the assistant's reply and its finish reason.
func (c *ChatClient) Complete(ctx context.Context, msgs []ChatMessage, maxTokens int, temperature float64) (string, string, error) {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	body := map[string]any{"model": c.Model, "messages": msgs, "max_tokens": maxTokens, "temperature": temperature}
	var r struct {
		Choices []struct {
			Message      ChatMessage `json:"message"`
			FinishReason string      `json:"finish_reason"`
		} `json:"choices"`
	}
	req := func(ctx context.Context) error {
		return callAuth(ctx, hc, c.BaseURL+"/v1/chat/completions", c.APIKey, body, &r)
	}
	if err := req(ctx); err != nil {
		return "", "", err
	}
	if len(r.Choices) == 0 {
		return "", "", fmt.Errorf("/v1/chat/completions: no choices in the answer")
	}
	return r.Choices[0].Message.Content, r.Choices[0].FinishReason, nil
}
