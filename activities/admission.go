package activities

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
)

// A sandbox lives from CreateSandbox to DestroySandbox, across many
// activities, so an activity slot limit does not bound how many run on a
// host. Admission does: CreateSandbox starts a container only while the
// host's live t1flow containers (counted by Docker, so a restarted worker
// and leaked containers count) plus the creations this worker is starting
// stay under MaxSandboxes. Past it the creation waits, heartbeating, up to
// AdmissionWait for a sandbox to go, then fails HostFull (retryable: the
// retry goes back to the shared queue, where a host with room may take it).
// A busy host so never overloads into looking dead.

// DefaultMaxSandboxes is the live sandboxes a host admits by default.
func DefaultMaxSandboxes() int { return 2 * runtime.NumCPU() }

// DefaultAdmissionWait is how long a creation waits for room on a full host.
const DefaultAdmissionWait = 2 * time.Minute

// admissionPoll is how often a waiting creation counts again.
var admissionPoll = 2 * time.Second

// admission holds the creations between the count and their container's start.
type admission struct {
	mu       sync.Mutex
	starting int
}

// admit reserves room for one sandbox, counting live ones with live; release
// ends the reservation once the container started (or failed to). max <= 0
// admits everything.
func (ad *admission) admit(ctx context.Context, max int, wait time.Duration, live func(context.Context) (int, error)) (release func(), err error) {
	if max <= 0 {
		return func() {}, nil
	}
	deadline := time.Now().Add(wait)
	for {
		n, err := live(ctx)
		if err != nil {
			return nil, errs.Infraf("count this host's sandboxes: %v", err)
		}
		ad.mu.Lock()
		if n+ad.starting < max {
			ad.starting++
			ad.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { ad.mu.Lock(); ad.starting--; ad.mu.Unlock() }) }, nil
		}
		starting := ad.starting
		ad.mu.Unlock()
		if !time.Now().Before(deadline) {
			return nil, errs.HostFullf("host full: %d live sandboxes and %d starting, at its limit of %d (worker -max-sandboxes) for %s", n, starting, max, wait)
		}
		heartbeat.Record(ctx, "waiting for room: host at its limit of sandboxes")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(admissionPoll, time.Until(deadline))):
		}
	}
}

// liveSandboxes counts this host's t1flow containers.
func (a *Activities) liveSandboxes(ctx context.Context) (int, error) {
	if a.countSandboxes != nil {
		return a.countSandboxes(ctx)
	}
	list, err := a.Docker.List(ctx, a.Host)
	return len(list), err
}
