package activities

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/errs"
)

func counting(n *atomic.Int64) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return int(n.Load()), nil }
}

// TestAdmissionCapsLiveSandboxes: live sandboxes plus creations being started
// never pass the cap; past it a creation fails HostFull (retryable, with the
// counts and the limit) once its wait is over; a released reservation, or a
// sandbox that went, makes room; no cap admits everything.
func TestAdmissionCapsLiveSandboxes(t *testing.T) {
	ctx := context.Background()
	var live atomic.Int64
	live.Store(1)
	var ad admission
	r1, err := ad.admit(ctx, 2, 0, counting(&live))
	if err != nil {
		t.Fatalf("1 live of 2: admitted, got %v", err)
	}
	_, err = ad.admit(ctx, 2, 0, counting(&live))
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.HostFull || ae.NonRetryable() || !strings.Contains(ae.Message(), "1 live sandboxes and 1 starting, at its limit of 2") {
		t.Fatalf("1 live + 1 starting of 2: want a retryable HostFull with the counts, got %v", err)
	}
	r1()
	r1() // a second release is harmless
	r2, err := ad.admit(ctx, 2, 0, counting(&live))
	if err != nil {
		t.Fatalf("after the release: admitted, got %v", err)
	}
	r2()
	live.Store(50)
	for i := 0; i < 3; i++ {
		if _, err := ad.admit(ctx, 0, 0, counting(&live)); err != nil {
			t.Fatalf("no cap: %v", err)
		}
	}
}

// TestAdmissionWaitsForRoom: a creation on a full host waits until a sandbox
// goes and is then admitted; a cancelled wait ends with its context.
func TestAdmissionWaitsForRoom(t *testing.T) {
	defer func(p time.Duration) { admissionPoll = p }(admissionPoll)
	admissionPoll = 5 * time.Millisecond
	var live atomic.Int64
	live.Store(2)
	var ad admission
	time.AfterFunc(50*time.Millisecond, func() { live.Store(1) })
	start := time.Now()
	release, err := ad.admit(context.Background(), 2, 10*time.Second, counting(&live))
	if err != nil || time.Since(start) < 40*time.Millisecond {
		t.Fatalf("full host: want admitted once a sandbox went (after ~50ms), got %v after %s", err, time.Since(start))
	}
	release()
	live.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := ad.admit(ctx, 2, 10*time.Second, counting(&live)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled wait: want its context's error, got %v", err)
	}
}

// TestAdmissionUnderConcurrentCreations: creations racing on one host get
// exactly the free room, never more.
func TestAdmissionUnderConcurrentCreations(t *testing.T) {
	var live atomic.Int64
	var ad admission
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ad.admit(context.Background(), 3, 0, counting(&live)); err == nil {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 3 {
		t.Fatalf("20 racing creations with room for 3: %d admitted", n)
	}
}

// TestCreateSandboxOnAFullHost: CreateSandbox asks admission before anything
// else, so a full host refuses a creation (HostFull) without a build or a
// container.
func TestCreateSandboxOnAFullHost(t *testing.T) {
	a := &Activities{Host: "h", MaxSandboxes: 1, countSandboxes: func(context.Context) (int, error) { return 1, nil }}
	_, err := a.CreateSandbox(context.Background(), CreateSandboxInput{RolloutID: "r"})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.HostFull {
		t.Fatalf("full host: want HostFull, got %v", err)
	}
}
