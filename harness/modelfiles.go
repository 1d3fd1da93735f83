package harness

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/httpjson"
)

// ModelFiles is the client of the model-files sidecar (gpu/hf/modelfiles.py,
// docs/trainer-protocol.md): the served checkpoint's own config.json, chat
// template and tokenizer, rendered and run by transformers beside the engine,
// so the harness tokenizes exactly as the model's files say whichever engine
// (stock vLLM or SGLang, or t1flow's hf server) samples.
type ModelFiles struct {
	BaseURL string
	HTTP    *http.Client
}

// Chat is the sidecar's chat contract: the template's pieces, and the
// system turn the template writes itself when a conversation has none
// (SmolLM2's does; "" when it writes none).
type Chat struct {
	inference.ChatTemplate
	DefaultSystem      string `json:"default_system"`
	DefaultSystemBlock string `json:"default_system_block"`
}

// Message is one chat message for Render.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (m *ModelFiles) do(ctx context.Context, method, path string, in, out any) error {
	hc := m.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return httpjson.Call(ctx, hc, method, strings.TrimRight(m.BaseURL, "/")+path, "model files "+path, "", in, out)
}

// Chat fetches the chat contract (check it with CheckTemplate).
func (m *ModelFiles) Chat(ctx context.Context) (Chat, error) {
	var c Chat
	err := m.do(ctx, http.MethodGet, "/chat", nil, &c)
	return c, err
}

// ModelConfig is the checkpoint's config.json as it is on disk.
func (m *ModelFiles) ModelConfig(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	err := m.do(ctx, http.MethodGet, "/model_config", nil, &raw)
	return raw, err
}

// Tokenize encodes text without BOS/EOS; splitSpecial encodes special-token
// text as plain text (observations and model text).
func (m *ModelFiles) Tokenize(ctx context.Context, text string, splitSpecial bool) ([]int, error) {
	var r struct {
		Tokens []int `json:"tokens"`
	}
	err := m.do(ctx, http.MethodPost, "/tokenize", map[string]any{"text": text, "split_special_tokens": splitSpecial}, &r)
	return r.Tokens, err
}

// Detokenize decodes token IDs, special tokens included.
func (m *ModelFiles) Detokenize(ctx context.Context, ids []int) (string, error) {
	var r struct {
		Text string `json:"text"`
	}
	err := m.do(ctx, http.MethodPost, "/detokenize", map[string]any{"tokens": ids}, &r)
	return r.Text, err
}

// Render is the template's own render of a conversation and its tokens.
func (m *ModelFiles) Render(ctx context.Context, msgs []Message, addGenerationPrompt bool) (string, []int, error) {
	var r struct {
		Text   string `json:"text"`
		Tokens []int  `json:"tokens"`
	}
	err := m.do(ctx, http.MethodPost, "/render", map[string]any{"messages": msgs, "add_generation_prompt": addGenerationPrompt}, &r)
	return r.Text, r.Tokens, err
}

// CheckTemplate refuses a chat contract the harness cannot stop on; source
// names where it came from, vocab (0: unknown) is the served vocabulary.
func CheckTemplate(source string, c inference.ChatTemplate, vocab int) error {
	switch {
	case c.EndOfTurn == "":
		return errs.BadInputf("%s: chat.end_of_turn is empty", source)
	case c.EndOfTurnID == nil || *c.EndOfTurnID < 0:
		return errs.BadInputf("%s: chat.end_of_turn_id is missing or negative", source)
	case vocab > 0 && *c.EndOfTurnID >= vocab:
		return errs.BadInputf("%s: chat.end_of_turn_id %d is outside the vocabulary (%d)", source, *c.EndOfTurnID, vocab)
	}
	return nil
}
