// Package httpjson is the one JSON-over-HTTP call that the trainer client and
// the inference clients share, so a non-2xx answer is the same *StatusError
// wherever it comes from and the trainer's error table can classify both.
package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// StatusError is a non-2xx answer, with the server's message.
type StatusError struct {
	Op     string
	Status int
	Msg    string
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.Status, e.Msg) }

// Call sends in as JSON (none when nil) and decodes the answer into out (none
// when nil). op names the call in errors; key, when set, is a bearer token.
func Call(ctx context.Context, hc *http.Client, method, url, op, key string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(b, &e)
		if e.Error == "" {
			e.Error = string(b)
		}
		return &StatusError{Op: op, Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s: bad answer: %w", op, err)
		}
	}
	return nil
}
