package inference

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/t1flow/t1flow/internal/httpjson"
)

func fakeReplica(t *testing.T, name string, calls *atomic.Int32, fail func(n int32) int) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if code := fail(n); code != 0 {
			w.WriteHeader(code)
			w.Write([]byte(`{"error": "` + name + ` says no"}`))
			return
		}
		w.Write([]byte(`{"text": "` + name + `", "output_ids": [1], "meta_info": {"finish_reason": {"type": "length", "length": 1}, "weight_version": "` + name + `"}}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func TestPoolStickyAndBalanced(t *testing.T) {
	var a, b atomic.Int32
	ra := fakeReplica(t, "a", &a, func(int32) int { return 0 })
	rb := fakeReplica(t, "b", &b, func(int32) int { return 0 })
	p, _ := NewPool([]string{ra.URL, rb.URL}, nil)
	ctx := context.Background()
	first, _ := p.Generate(ctx, "rollout-1", Request{})
	for i := 0; i < 5; i++ {
		r, err := p.Generate(ctx, "rollout-1", Request{})
		if err != nil || r.Text != first.Text {
			t.Fatalf("rollout-1 moved from %s to %s (%v)", first.Text, r.Text, err)
		}
	}
	// A second session while the first replica is busy goes to the other one.
	busy := p.pick("rollout-1")
	busy.outstanding.Add(1)
	other, _ := p.Generate(ctx, "rollout-2", Request{})
	busy.outstanding.Add(-1)
	if other.Text == first.Text {
		t.Fatalf("rollout-2 joined the busy replica %s", other.Text)
	}
	if p.Replica("rollout-2") == "" || p.Replica("rollout-2") == p.Replica("rollout-1") {
		t.Fatal("sessions should be pinned to different replicas")
	}
}

func TestPoolRetriesServerErrorsNotClientErrors(t *testing.T) {
	var n atomic.Int32
	flaky := fakeReplica(t, "flaky", &n, func(c int32) int {
		if c <= 2 {
			return 503
		}
		return 0
	})
	p, _ := NewPool([]string{flaky.URL}, nil)
	p.Backoff = time.Millisecond
	r, err := p.Generate(context.Background(), "s", Request{})
	if err != nil || r.Text != "flaky" || n.Load() != 3 {
		t.Fatalf("want success on the third try: %v, %d calls", err, n.Load())
	}
	var m atomic.Int32
	picky := fakeReplica(t, "picky", &m, func(int32) int { return 400 })
	p2, _ := NewPool([]string{picky.URL}, nil)
	_, err = p2.Generate(context.Background(), "s", Request{})
	var se *httpjson.StatusError
	if !errors.As(err, &se) || se.Status != 400 || !strings.Contains(se.Msg, "picky says no") || m.Load() != 1 || Retryable(err) {
		t.Fatalf("a 4xx must come back at once with its message: %v after %d calls", err, m.Load())
	}
}

func TestPoolFailsOverWhenAReplicaDies(t *testing.T) {
	var a, b atomic.Int32
	ra := fakeReplica(t, "a", &a, func(int32) int { return 0 })
	rb := fakeReplica(t, "b", &b, func(int32) int { return 0 })
	p, _ := NewPool([]string{ra.URL, rb.URL}, nil)
	p.Backoff = time.Millisecond
	ctx := context.Background()
	first, _ := p.Generate(ctx, "s", Request{})
	if first.Text == "a" {
		ra.Close()
	} else {
		rb.Close()
	}
	r, err := p.Generate(ctx, "s", Request{})
	if err != nil || r.Text == first.Text {
		t.Fatalf("the session should move to the live replica: %v %v", r, err)
	}
}
