package gpu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/errs"
)

// TestTrainerLeaseOneCampaignAtATime: a campaign takes the trainer's lease;
// another is refused (TrainerBusy, naming the holder, non-retryable) while
// the holder runs, in its init and in any training call under its keys, and
// takes the lease once the holder has ended; the holder itself may take it
// again (a resumed or restarted campaign of the same name).
func TestTrainerLeaseOneCampaignAtATime(t *testing.T) {
	ctx := context.Background()
	running := map[string]bool{"a": true}
	a := &Activities{WorkDir: t.TempDir(), Running: func(_ context.Context, c string) (bool, error) { return running[c], nil }}
	if err := a.checkLease("b/x/sft/0"); err != nil {
		t.Fatalf("no holder: anything trains, got %v", err)
	}
	if err := a.acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := a.acquire(ctx, "a"); err != nil {
		t.Fatalf("the holder takes its own lease again: %v", err)
	}
	busy := func(err error) {
		t.Helper()
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != errs.TrainerBusy || !ae.NonRetryable() || !strings.Contains(ae.Message(), "campaign a") {
			t.Fatalf("want a non-retryable TrainerBusy naming campaign a, got %v", err)
		}
	}
	busy(a.acquire(ctx, "b"))
	busy(a.checkLease("b/1234/sft/0"))
	busy(a.checkLease("ab/1234/sft/0")) // a prefix of the name is another campaign
	if err := a.checkLease("a/1234/ppo/1"); err != nil {
		t.Fatalf("the holder's keys train: %v", err)
	}
	if _, err := a.TrainerInit(ctx, InitInput{Campaign: "b"}); err == nil {
		t.Fatal("TrainerInit of b while a runs must fail before touching the trainer")
	}
	running["a"] = false
	if err := a.acquire(ctx, "b"); err != nil {
		t.Fatalf("a ended: b takes the trainer, got %v", err)
	}
	busy2 := a.checkLease("a/1234/ppo/2")
	if busy2 == nil || !strings.Contains(busy2.Error(), "campaign b") {
		t.Fatalf("a's keys after b took the trainer: %v", busy2)
	}
}
