package gpu

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/t1flow/t1flow/internal/httpjson"
)

// Client speaks the trainer protocol.
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

// NewClient talks to a trainer at baseURL (http://127.0.0.1:PORT).
func NewClient(baseURL string) *Client {
	return &Client{BaseURL: baseURL, HTTP: &http.Client{}}
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return httpjson.Call(ctx, c.HTTP, method, c.BaseURL+path, path, "", in, out)
}

// Health asks whether the trainer is up.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/health", nil, &h)
	return h, err
}

// Progress reports the running operation.
func (c *Client) Progress(ctx context.Context) (Progress, error) {
	var p Progress
	err := c.do(ctx, http.MethodGet, "/progress", nil, &p)
	return p, err
}

// Train runs op (sft, critic_fit or ppo_step). A repeated key returns the
// recorded result (Metrics.Replayed) without training again.
func (c *Client) Train(ctx context.Context, op string, req TrainRequest) (Metrics, error) {
	switch op {
	case "sft", "critic_fit", "ppo_step":
	default:
		return nil, fmt.Errorf("trainer op %q: use sft, critic_fit or ppo_step", op)
	}
	var m Metrics
	err := c.do(ctx, http.MethodPost, "/"+op, req, &m)
	return m, err
}

// Save writes a checkpoint directory on the trainer's host.
func (c *Client) Save(ctx context.Context, dir string) (Manifest, error) {
	var m Manifest
	err := c.do(ctx, http.MethodPost, "/save", map[string]string{"dir": dir}, &m)
	return m, err
}

// Load replaces the trainer's weights with a checkpoint directory.
func (c *Client) Load(ctx context.Context, dir string) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodPost, "/load", map[string]string{"dir": dir}, &h)
	return h, err
}

// Init replaces the trainer's weights with fresh random ones from seed (version 0).
func (c *Client) Init(ctx context.Context, seed int) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodPost, "/init", map[string]int{"seed": seed}, &h)
	return h, err
}

// Cancel asks the trainer to abandon the operation with this key.
func (c *Client) Cancel(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodPost, "/cancel", map[string]string{"key": key}, nil)
}

// WaitHealthy polls /health until it answers or the timeout passes.
func WaitHealthy(ctx context.Context, probe func(context.Context) error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = probe(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.Join(fmt.Errorf("no healthy answer within %s", timeout), last)
}

// Score asks the trainer for its policy's log-prob of tokens[1:] at the
// temperature, replaying routing ([T−1][MoE layers][top_k]) when given; it
// also returns the trainer's weight version.
func (c *Client) Score(ctx context.Context, tokens []int, routing [][][]int32, temperature float64) ([]float64, string, error) {
	body := map[string]any{"tokens": tokens, "temperature": temperature}
	if routing != nil {
		body["routing"] = routing
	}
	var r struct {
		Logprobs      []float64 `json:"logprobs"`
		WeightVersion string    `json:"weight_version"`
	}
	err := c.do(ctx, http.MethodPost, "/score", body, &r)
	return r.Logprobs, r.WeightVersion, err
}
