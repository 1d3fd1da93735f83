package activities

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/t1flow/t1flow/sandbox"
)

// DiskWatchInterval is how often a watched sandbox's writable layer is
// measured: the host loses at most storage_mb plus what the agent writes in
// one interval (docs/verification.md).
var DiskWatchInterval = 2 * time.Second

// diskWatches are the storage_mb watches of this host's sandboxes, for
// daemons that cannot enforce a size (sandbox.DiskLimit). One runs from a
// sandbox's first turn (started again by a turn after a worker restart) until
// verification or removal; it kills the sandbox when it goes over.
type diskWatches struct {
	mu sync.Mutex
	m  map[string]*diskWatch
}

type diskWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
}

// watchDisk starts the sandbox's watch unless it runs already or the sandbox
// needs none (no LabelDiskWatch: the daemon enforces the size, or no limit).
func (a *Activities) watchDisk(ctx context.Context, id string) error {
	a.disk.mu.Lock()
	_, ok := a.disk.m[id]
	a.disk.mu.Unlock()
	if ok {
		return nil
	}
	ins, err := a.Docker.Client.ContainerInspect(ctx, id)
	if err != nil {
		return err
	}
	mb, _ := strconv.ParseInt(ins.Config.Labels[sandbox.LabelDiskWatch], 10, 64)
	if mb <= 0 {
		return nil
	}
	a.disk.mu.Lock()
	defer a.disk.mu.Unlock()
	if _, ok := a.disk.m[id]; ok {
		return nil
	}
	if a.disk.m == nil {
		a.disk.m = map[string]*diskWatch{}
	}
	wctx, cancel := context.WithCancel(context.Background())
	w := &diskWatch{cancel: cancel, done: make(chan struct{})}
	a.disk.m[id] = w
	go func() {
		w.err = sandbox.DiskWatch(wctx, a.Docker.Client, id, mb, DiskWatchInterval)
		close(w.done)
	}()
	return nil
}

// diskExceeded reports, without waiting, whether the watch stopped the
// sandbox for writing past its limit.
func (a *Activities) diskExceeded(id string) *sandbox.DiskExceeded {
	a.disk.mu.Lock()
	w := a.disk.m[id]
	a.disk.mu.Unlock()
	if w == nil {
		return nil
	}
	select {
	case <-w.done:
		var de sandbox.DiskExceeded
		if errors.As(w.err, &de) {
			return &de
		}
	default:
	}
	return nil
}

// stopDiskWatch ends the sandbox's watch (verification writes are the
// verifier's, and it runs after every agent process is dead) and reports
// whether it had stopped the sandbox. The entry stays, so a retried
// verification still knows, until forgetDisk.
func (a *Activities) stopDiskWatch(id string) *sandbox.DiskExceeded {
	a.disk.mu.Lock()
	w := a.disk.m[id]
	a.disk.mu.Unlock()
	if w == nil {
		return nil
	}
	w.cancel()
	<-w.done
	var de sandbox.DiskExceeded
	if errors.As(w.err, &de) {
		return &de
	}
	return nil
}

// forgetDisk drops the sandbox's watch when the sandbox is removed.
func (a *Activities) forgetDisk(id string) {
	a.stopDiskWatch(id)
	a.disk.mu.Lock()
	delete(a.disk.m, id)
	a.disk.mu.Unlock()
}
