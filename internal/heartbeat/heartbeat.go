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
				if details == nil {
					activity.RecordHeartbeat(ctx)
				} else {
					activity.RecordHeartbeat(ctx, details(ctx))
				}
			}
		}
	}()
	return func() { close(done) }
}
