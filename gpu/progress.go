package gpu

import (
	"context"
	"fmt"
	"time"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
)

// DefaultStallWindow is how long a trainer operation may go without its
// progress moving before it counts as hung. Five minutes: on 2 CPU cores one
// minibatch of two-turn Terminus-2 rollouts (the reference model's forward
// and backward) takes over a minute; at the old 60 s the watchdog restarted
// such a PPO step (the bench campaign's, before it moved to the short
// harness) 30 times in a row.
const DefaultStallWindow = 5 * time.Minute

// progressPoll is how often a running operation's progress is read.
const progressPoll = 2 * time.Second

// progressSig is what "moved" compares: any change of op, key or counters
// (the beat included: work between minibatch ticks).
func progressSig(p Progress) string {
	op, key := "", ""
	if p.Op != nil {
		op = *p.Op
	}
	if p.Key != nil {
		key = *p.Key
	}
	return fmt.Sprintf("%s %s %d/%d beat %d", op, key, p.Done, p.Total, p.Beat)
}

// watchProgress follows a running trainer operation. Every progressPoll it
// reads the trainer's /progress and heartbeats with it, but only while the
// progress has moved within the stall window: heartbeats mean progress. Once
// it has not moved (or the trainer has not answered) for the whole window,
// heartbeats stop and cancel ends the call. stop ends the watch and returns
// the stall, if there was one: a retryable InfraError.
func (a *Activities) watchProgress(ctx context.Context, cancel context.CancelFunc) (stop func() error) {
	window := a.StallWindow
	if window <= 0 {
		window = DefaultStallWindow
	}
	done, exited := make(chan struct{}), make(chan struct{})
	var stalled error
	go func() {
		defer close(exited)
		t := time.NewTicker(progressPoll)
		defer t.Stop()
		last, moved, seen := "", time.Now(), "no answer yet"
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			pctx, c := context.WithTimeout(ctx, progressPoll)
			p, err := a.Trainer.Progress(pctx)
			c()
			if err == nil {
				if sig := progressSig(p); sig != last {
					last, moved = sig, time.Now()
				}
				seen = last
			} else {
				seen = "unreachable: " + err.Error()
			}
			if idle := time.Since(moved); idle >= window {
				stalled = errs.Infraf("trainer stalled: its progress did not move for %s (stall window %s; last progress %q, now %s); restarting it", idle.Round(time.Second), window, last, seen)
				cancel()
				return
			}
			if err == nil {
				heartbeat.Record(ctx, p)
			}
		}
	}()
	return func() error {
		close(done)
		<-exited
		return stalled
	}
}

// restartTrainer kills a hung trainer; its supervisor starts it again and it
// reloads its last committed state.
func (a *Activities) restartTrainer() {
	if a.RestartTrainer != nil {
		a.RestartTrainer()
	}
}

// bytesProgress is the heartbeat of a download or upload: what moved so far.
type bytesProgress struct {
	Phase string `json:"phase"`
	Files int    `json:"files"`
	Of    int    `json:"of"`
	Bytes int64  `json:"bytes"`
	last  time.Time
}

func newBytesProgress(phase string) *bytesProgress {
	return &bytesProgress{Phase: phase, last: time.Now()}
}

// moved counts one more file of n, of size bytes, and heartbeats what moved
// so far once progressPoll has passed since the last one (a quick transfer
// sends none, and the SDK sends only the first and the latest anyway).
func (b *bytesProgress) moved(ctx context.Context, n int, size int) {
	b.Files++
	b.Of = n
	b.Bytes += int64(size)
	if time.Since(b.last) >= progressPoll {
		b.last = time.Now()
		heartbeat.Record(ctx, *b)
	}
}

// alive heartbeats phase while a trainer call that reports no progress
// (save, load) runs, and only while the trainer answers /health: an
// unreachable trainer stops the heartbeats, and the heartbeat timeout retries.
func (a *Activities) alive(ctx context.Context, phase string) (stop func()) {
	return heartbeat.While(ctx, progressPoll, func(ctx context.Context) (any, bool) {
		pctx, c := context.WithTimeout(ctx, progressPoll)
		defer c()
		_, err := a.Trainer.Health(pctx)
		return phase, err == nil
	})
}
