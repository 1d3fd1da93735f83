package inference

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/t1flow/t1flow/internal/httpjson"
)

// Pool spreads rollouts over inference replicas. A rollout (session) stays on
// one replica while it is healthy, so the replica's prefix cache keeps its
// context; new sessions go to the healthy replica with the fewest outstanding
// requests. Transport errors and 5xx are retried with backoff (on another
// replica when the first is down); a 4xx is returned at once as a
// *httpjson.StatusError carrying the server's message.
type Pool struct {
	Retries int           // retries after the first try
	Backoff time.Duration // first backoff; doubles each retry

	replicas []*replica
	mu       sync.Mutex
	sticky   map[string]*replica
}

type replica struct {
	engine      Engine
	client      *Client // the same server's HTTP side (t1flow's own routes)
	outstanding atomic.Int64
	down        atomic.Bool
}

// NewPool makes a pool over t1flow's own servers (EngineT1flow).
func NewPool(urls []string, hc *http.Client) (*Pool, error) {
	return NewEnginePool(EngineT1flow, urls, hc)
}

// NewEnginePool makes a pool over servers of one engine kind.
func NewEnginePool(kind string, urls []string, hc *http.Client) (*Pool, error) {
	if len(urls) == 0 {
		return nil, errors.New("inference pool: no replica URLs (use --inference URL[,URL...])")
	}
	p := &Pool{Retries: 4, Backoff: 200 * time.Millisecond, sticky: map[string]*replica{}}
	for _, u := range urls {
		e, err := NewEngine(kind, u, hc)
		if err != nil {
			return nil, err
		}
		p.replicas = append(p.replicas, &replica{engine: e, client: &Client{BaseURL: e.URL(), HTTP: hc}})
	}
	return p, nil
}

// Kind is the engine kind of the pool's replicas.
func (p *Pool) Kind() string { return p.replicas[0].engine.Kind() }

// URLs lists the replicas.
func (p *Pool) URLs() []string {
	out := make([]string, len(p.replicas))
	for i, r := range p.replicas {
		out[i] = r.client.BaseURL
	}
	return out
}

func (p *Pool) pick(session string) *replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.sticky[session]; ok && !r.down.Load() {
		return r
	}
	var best *replica
	for _, r := range p.replicas {
		if r.down.Load() {
			continue
		}
		if best == nil || r.outstanding.Load() < best.outstanding.Load() {
			best = r
		}
	}
	if best == nil {
		// Everything looks down: try them again rather than fail outright.
		for _, r := range p.replicas {
			r.down.Store(false)
		}
		best = p.replicas[0]
	}
	if session != "" {
		p.sticky[session] = best
	}
	return best
}

// Replica reports which replica a session is on ("" if none yet).
func (p *Pool) Replica(session string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.sticky[session]; ok {
		return r.client.BaseURL
	}
	return ""
}

// Forget drops a finished session's stickiness.
func (p *Pool) Forget(session string) {
	p.mu.Lock()
	delete(p.sticky, session)
	p.mu.Unlock()
}

// Retryable reports whether err is worth another try (not a 4xx).
func Retryable(err error) bool {
	var se *httpjson.StatusError
	if errors.As(err, &se) {
		return se.Status/100 != 4
	}
	return err != nil && !errors.Is(err, context.Canceled)
}

func do[T any](ctx context.Context, p *Pool, session string, fn func(*replica) (T, error)) (T, error) {
	var zero T
	backoff := p.Backoff
	var last error
	for attempt := 0; attempt <= p.Retries; attempt++ {
		r := p.pick(session)
		r.outstanding.Add(1)
		out, err := fn(r)
		r.outstanding.Add(-1)
		if err == nil {
			return out, nil
		}
		last = err
		var ab *AbortError
		if !Retryable(err) || ctx.Err() != nil || errors.As(err, &ab) {
			return zero, err // an abort is retried by the rollout, with a fresh sandbox
		}
		var se *httpjson.StatusError
		if !errors.As(err, &se) {
			r.down.Store(true) // transport error: send the session elsewhere
			go p.recheck(r)
		}
		select {
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return zero, fmt.Errorf("inference: %d tries failed: %w", p.Retries+1, last)
}

// recheck marks a replica up again once it answers /health.
func (p *Pool) recheck(r *replica) {
	for i := 0; i < 30 && r.down.Load(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if r.engine.Health(ctx) == nil {
			r.down.Store(false)
		}
		cancel()
		time.Sleep(time.Second)
	}
}

// Generate runs one generation for a session on its replica.
func (p *Pool) Generate(ctx context.Context, session string, req Request) (*Generation, error) {
	return do(ctx, p, session, func(r *replica) (*Generation, error) { return r.engine.Generate(ctx, req) })
}

// Info asks the session's replica what it reports about itself.
func (p *Pool) Info(ctx context.Context, session string) (ServerInfo, error) {
	return do(ctx, p, session, func(r *replica) (ServerInfo, error) { return r.engine.Info(ctx) })
}

// ModelInfo asks the session's replica for t1flow's /get_model_info.
func (p *Pool) ModelInfo(ctx context.Context, session string) (ModelInfo, error) {
	return do(ctx, p, session, func(r *replica) (ModelInfo, error) { return r.client.ModelInfo(ctx) })
}

// Tokenize encodes text on the session's replica (Client.Tokenize).
func (p *Pool) Tokenize(ctx context.Context, session, text string, splitSpecial bool) ([]int, error) {
	return do(ctx, p, session, func(r *replica) ([]int, error) { return r.client.Tokenize(ctx, text, splitSpecial) })
}
