package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/t1flow/t1flow/sandbox"
)

func TestDiskLimitIsEnforced(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	plan, err := sandbox.DiskLimit(ctx, r.cli, r.baseTag(), 50)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", plan.Why)
	if !plan.Watch {
		if plan.StorageOpt["size"] != "50M" {
			t.Fatalf("plan %+v", plan)
		}
		t.Skip("the daemon enforces sizes itself")
	}
	id := r.sandbox(r.baseTag())
	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() { done <- sandbox.DiskWatch(wctx, r.cli, id, 50, 500*time.Millisecond) }()
	start := time.Now()
	r.exec(id, []string{"bash", "-c", "for i in $(seq 1 40); do head -c 10000000 /dev/zero > /tmp/f$i; sleep 0.1; done"}, nil, "")
	err = <-done
	var ex sandbox.DiskExceeded
	if !errors.As(err, &ex) {
		t.Fatalf("DiskWatch: %v", err)
	}
	ins, _ := r.cli.ContainerInspect(ctx, id)
	t.Logf("%v after %s; container running: %v", ex, time.Since(start), ins.State.Running)
	if ins.State.Running || ex.Used > 200<<20 {
		t.Fatalf("not stopped in time: %v, running %v", ex, ins.State.Running)
	}
}
