// Package heartbeat records Temporal activity heartbeats: once, or on a
// ticker for as long as a long call runs. Outside an activity (unit tests,
// the benchmarks) every call is a no-op.
package heartbeat

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// Record heartbeats once with details, when ctx is an activity's.
func Record(ctx context.Context, details ...any) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, details...)
	}
}

// Every heartbeats each interval with what details returns (nil: no details)
// until the returned stop func is called or ctx ends.
func Every(ctx context.Context, every time.Duration, details func(context.Context) any) (stop func()) {
	return While(ctx, every, func(ctx context.Context) (any, bool) {
		if details == nil {
			return nil, true
		}
		return details(ctx), true
	})
}

// While is Every where each tick first asks check whether to heartbeat at
// all: a tick whose check says false sends nothing (the heartbeat timeout
// then notices a call that stopped making progress).
func While(ctx context.Context, every time.Duration, check func(context.Context) (details any, ok bool)) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				switch d, ok := check(ctx); {
				case !ok:
				case d == nil:
					activity.RecordHeartbeat(ctx)
				default:
					activity.RecordHeartbeat(ctx, d)
				}
			}
		}
	}()
	return func() { close(done) }
}
