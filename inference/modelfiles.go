package inference

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
)

// ModelFiles is the client of the model-files sidecar (gpu/hf/modelfiles.py)
// that serves the checkpoint's own files beside a stock engine.
type ModelFiles struct {
	BaseURL string
	HTTP    *http.Client
}

// Config is GET /model_config: the checkpoint's config.json, verbatim.
func (m *ModelFiles) Config(ctx context.Context) ([]byte, error) {
	c := &Client{BaseURL: strings.TrimRight(m.BaseURL, "/"), HTTP: m.HTTP}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/model_config", nil, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}
