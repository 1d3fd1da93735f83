// Package steptime times the named steps of one call (a verification, say)
// for a caller that asks: the benchmarks put a Clock in the context, and the
// code under measurement marks its steps. Without a Clock every call is a
// no-op, so production paths carry the marks at no cost.
package steptime

import (
	"context"
	"sync"
	"time"
)

// Step is one timed step.
type Step struct {
	Name string
	D    time.Duration
}

// Clock collects the steps timed under a context.
type Clock struct {
	mu    sync.Mutex
	steps []Step
}

type key struct{}

// With returns ctx carrying c: steps timed under it are added to c.
func With(ctx context.Context, c *Clock) context.Context { return context.WithValue(ctx, key{}, c) }

// Start starts timing the step name; the returned func ends it. Without a
// Clock in ctx it does nothing.
func Start(ctx context.Context, name string) (end func()) {
	c, _ := ctx.Value(key{}).(*Clock)
	if c == nil {
		return func() {}
	}
	t0 := time.Now()
	return func() { c.Add(name, time.Since(t0)) }
}

// Add records a step that took d.
func (c *Clock) Add(name string, d time.Duration) {
	c.mu.Lock()
	c.steps = append(c.steps, Step{name, d})
	c.mu.Unlock()
}

// Steps returns the steps recorded so far, in the order they ended; a step
// timed twice appears twice.
func (c *Clock) Steps() []Step {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Step(nil), c.steps...)
}
