package gpu

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

// TestTrainerClaim: a named trainer answers its own queue; a trainer another
// running campaign holds is refused (TrainerBusy naming the trainer and the
// holder) without taking its lease; once the holder has ended, or for the
// holder itself, the claim succeeds; an unnamed trainer answers no queue.
func TestTrainerClaim(t *testing.T) {
	ctx := context.Background()
	running := map[string]bool{"a": true}
	a := &Activities{Name: "gpu-1", WorkDir: t.TempDir(), Running: func(_ context.Context, c string) (bool, error) { return running[c], nil }}
	ref, err := a.TrainerClaim(ctx, "b")
	if err != nil || ref.Name != "gpu-1" || ref.Queue != ids.TrainerQueue("gpu-1") || ref.Queue == ids.GPUQueue {
		t.Fatalf("free trainer: %+v, %v; want gpu-1 on %s", ref, err, ids.TrainerQueue("gpu-1"))
	}
	if _, err := os.Stat(a.leasePath()); err == nil {
		t.Fatal("a claim took the lease (TrainerInit takes it, on the trainer's own queue)")
	}
	if err := a.acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	_, err = a.TrainerClaim(ctx, "b")
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.TrainerBusy || !strings.Contains(ae.Message(), "gpu-1") || !strings.Contains(ae.Message(), "campaign a") {
		t.Fatalf("held by running a: want TrainerBusy naming gpu-1 and campaign a, got %v", err)
	}
	if _, err := a.TrainerClaim(ctx, "a"); err != nil {
		t.Fatalf("the holder claims its own trainer: %v", err)
	}
	running["a"] = false
	if _, err := a.TrainerClaim(ctx, "b"); err != nil {
		t.Fatalf("a ended: b claims the trainer, got %v", err)
	}
	if l, _ := a.lease(); l.Campaign != "a" {
		t.Fatalf("claims changed the lease to %+v", l)
	}
	a.Name = ""
	if ref, err := a.TrainerClaim(ctx, "b"); err != nil || ref.Queue != "" {
		t.Fatalf("unnamed trainer: %+v, %v; want no queue (the shared one)", ref, err)
	}
}
