package gpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// TestTrainerInitResumeKeepsOwnStateOrLoads: a resumed campaign whose lease
// nobody took since keeps the trainer's state (its own latest: at or past
// the checkpoint, e.g. a step committed after it), loading nothing; once
// another campaign held the trainer, or when the trainer is behind the
// checkpoint, the checkpoint is loaded.
func TestTrainerInitResumeKeepsOwnStateOrLoads(t *testing.T) {
	ctx := context.Background()
	version, loads := 4, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			fmt.Fprintf(w, `{"ok": true, "version": %d}`, version)
		case "/load":
			loads++
			version = 3
			fmt.Fprint(w, `{"version": 3, "weight_version": "v3"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	running := map[string]bool{"other": false}
	a := &Activities{Trainer: NewClient(srv.URL), WorkDir: t.TempDir(), Running: func(_ context.Context, c string) (bool, error) { return running[c], nil }}
	ck := &Checkpoint{Name: "a/e1/step-0001", WeightVersion: "v3"}
	resume := InitInput{Campaign: "a", Checkpoint: ck, Resume: true}
	if err := a.acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	h, err := a.TrainerInit(ctx, resume)
	if err != nil || !h.Kept || h.Version != 4 || loads != 0 {
		t.Fatalf("own lease, trainer at v4 past the checkpoint (v3): kept %v, version %d, loads %d, err %v; want kept, no load", h.Kept, h.Version, loads, err)
	}
	version = 2 // behind the checkpoint: not the campaign's latest
	if h, err = a.TrainerInit(ctx, resume); err != nil || h.Kept || loads != 1 || h.Version != 3 {
		t.Fatalf("trainer behind the checkpoint: kept %v, loads %d, version %d, err %v; want the checkpoint loaded", h.Kept, loads, h.Version, err)
	}
	if err := a.acquire(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	version = 9
	if h, err = a.TrainerInit(ctx, resume); err != nil || h.Kept || loads != 2 {
		t.Fatalf("another campaign held the trainer since: kept %v, loads %d, err %v; want the checkpoint loaded", h.Kept, loads, err)
	}
	if l, _ := a.lease(); l.Campaign != "a" {
		t.Fatalf("resume did not re-take the lease: %+v", l)
	}
	if _, err := a.TrainerInit(ctx, InitInput{Campaign: "a", Resume: true}); err == nil {
		t.Fatal("a resume without a checkpoint must be refused")
	}
}

// A campaign's random init is random weights from its seed on the reference,
// and the worker's -model checkpoint on the hf backend.
func TestTrainerInitRandomOnEachBackend(t *testing.T) {
	ctx := context.Background()
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, r.URL.Path+" "+strings.TrimSpace(string(b)))
		fmt.Fprint(w, `{"version": 0, "weight_version": "v0"}`)
	}))
	defer srv.Close()
	a := &Activities{Trainer: NewClient(srv.URL), WorkDir: t.TempDir()}
	if _, err := a.TrainerInit(ctx, InitInput{Campaign: "a", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	a.Model = "/models/tiny"
	if _, err := a.TrainerInit(ctx, InitInput{Campaign: "a", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0] != `/init {"seed":3}` || calls[1] != `/load {"dir":"/models/tiny"}` {
		t.Fatalf("trainer calls %q: want /init with the seed on the reference, /load of -model on hf", calls)
	}
}
