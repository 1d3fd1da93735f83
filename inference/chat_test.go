package inference

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestChatClientAcceptsBaseURLWithOrWithoutV1(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":"no route"}`, http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{
			"message": map[string]string{"role": "assistant", "content": "hi"}, "finish_reason": "stop"}}})
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "/v1", srv.URL + "/v1/"} {
		c := &ChatClient{BaseURL: base, Model: "m"}
		got, err := c.Ask(context.Background(), "hello", 8, 1)
		if err != nil || got != "hi" {
			t.Errorf("base %q: %q, %v", base, got, err)
		}
	}
	// A wrong path is an HTTP error that names the endpoint it called.
	c := &ChatClient{BaseURL: srv.URL + "/api", Model: "m"}
	_, err := c.Ask(context.Background(), "hello", 8, 1)
	if err == nil || !strings.Contains(err.Error(), srv.URL+"/api/v1/chat/completions") || !strings.Contains(err.Error(), "404") {
		t.Fatalf("wrong endpoint: %v", err)
	}
}
