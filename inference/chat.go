package inference

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/t1flow/t1flow/internal/httpjson"
)

// ChatMessage is one OpenAI-style chat message.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatClient speaks an OpenAI-compatible /v1/chat/completions endpoint
// (hosted models, eval only: text in and out).
type ChatClient struct {
	BaseURL string // with or without a trailing /v1: both name the same server
	Model   string
	APIKey  string
	HTTP    *http.Client // nil: one with ChatTimeout
}

// ChatTimeout bounds one chat call when no HTTP client is given: a hung
// endpoint is an infrastructure failure to retry, not a wait until the
// activity's own timeout.
const ChatTimeout = 5 * time.Minute

var defaultChatHTTP = &http.Client{Timeout: ChatTimeout}

// Endpoint is the chat completions URL. OpenAI clients are configured both
// ways ("http://host:port" and "http://host:port/v1"), so both are accepted.
func (c *ChatClient) Endpoint() string {
	base := strings.TrimSuffix(strings.TrimRight(c.BaseURL, "/"), "/v1")
	return base + "/v1/chat/completions"
}

// Complete returns the assistant's reply and its finish reason. A
// maxTokens of 0 or less and a nil temperature are not sent: the model's
// own defaults apply.
func (c *ChatClient) Complete(ctx context.Context, msgs []ChatMessage, maxTokens int, temperature *float64) (string, string, error) {
	hc := c.HTTP
	if hc == nil {
		hc = defaultChatHTTP
	}
	body := map[string]any{"model": c.Model, "messages": msgs}
	if maxTokens > 0 {
		body["max_tokens"] = maxTokens
	}
	if temperature != nil {
		body["temperature"] = *temperature
	}
	var r struct {
		Choices []struct {
			Message      ChatMessage `json:"message"`
			FinishReason string      `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := httpjson.Call(ctx, hc, http.MethodPost, c.Endpoint(), c.Endpoint(), c.APIKey, body, &r); err != nil {
		return "", "", err
	}
	if len(r.Choices) == 0 {
		return "", "", fmt.Errorf("%s: no choices in the answer", c.Endpoint())
	}
	return r.Choices[0].Message.Content, r.Choices[0].FinishReason, nil
}

// Ask sends one user message and returns the reply: the synthesizer's use,
// which needs no history.
func (c *ChatClient) Ask(ctx context.Context, prompt string, maxTokens int, temperature float64) (string, error) {
	reply, _, err := c.Complete(ctx, []ChatMessage{{Role: "user", Content: prompt}}, maxTokens, &temperature)
	return reply, err
}
