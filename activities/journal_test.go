package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// lines counts the lines of a file in the sandbox.
func lines(t *testing.T, d *sandbox.Docker, id, path string) int {
	t.Helper()
	res, err := d.Exec(context.Background(), id, "cat "+path+" 2>/dev/null | wc -l", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, c := range strings.TrimSpace(res.Output) {
		n = n*10 + int(c-'0')
	}
	return n
}

func wantLost(t *testing.T, what string, err error) {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.TurnLost || !ae.NonRetryable() {
		t.Fatalf("%s: %v, want a non-retryable %s", what, err, errs.TurnLost)
	}
}

// A turn's command runs at most once in its sandbox, whatever retries it:
// the journal on the sandbox host is written before the command starts, so
// a retry after a worker died mid-turn reports the turn lost instead of
// running it again, and a retry after it finished returns its recorded result.
func TestRetriedTurnNeverRunsTwice(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	st, _ := store.NewLocal(t.TempDir())
	tk, err := task.Load("../examples/tasks/csv-revenue-report")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	episodes := t.TempDir()
	a := &activities.Activities{Docker: d, Store: st, Host: testenv.HostName("unit"), TaskCache: t.TempDir(), EpisodeDir: episodes}
	rollout := testenv.HostName("unit") + ".journal." + tk.ID
	cs, err := a.CreateSandbox(ctx, activities.CreateSandboxInput{Task: ref, RolloutID: rollout, SandboxAttempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.DestroySandbox(context.Background(), activities.DestroyInput{Sandbox: cs.Sandbox}) })
	id := cs.Sandbox.ContainerID
	agent := activities.AgentSpec{Kind: activities.AgentScripted, Commands: []string{
		"echo ran >> /tmp/probe0",
		"echo ran >> /tmp/probe1; sleep 3",
		"echo ran >> /tmp/probe2; echo output",
	}}
	turn := func(a *activities.Activities, ctx context.Context, n int) (activities.TurnResult, error) {
		return a.AgentTurn(ctx, activities.TurnInput{Sandbox: cs.Sandbox, Task: ref, Agent: agent, RolloutID: rollout, Turn: n, TimeoutSec: 30})
	}

	// Turn 0: the worker dies right after the command was sent.
	activities.SetAfterSend(a, func(activities.TurnInput) error { return errors.New("worker killed") })
	if _, err := turn(a, ctx, 0); err == nil || !strings.Contains(err.Error(), "worker killed") {
		t.Fatalf("first attempt: %v", err)
	}
	activities.SetAfterSend(a, nil)
	_, err = turn(a, ctx, 0)
	wantLost(t, "retry of a turn whose command was sent", err)
	// A restarted worker (nothing in memory) finds the same journal.
	restarted := &activities.Activities{Docker: d, Store: st, Host: a.Host, TaskCache: t.TempDir(), EpisodeDir: episodes}
	_, err = turn(restarted, ctx, 0)
	wantLost(t, "retry on a restarted worker", err)
	if n := lines(t, d, id, "/tmp/probe0"); n != 1 {
		t.Fatalf("turn 0's command ran %d times, want once", n)
	}

	// Turn 1: the attempt is cut off while its command still runs in the container.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		for lines(t, d, id, "/tmp/probe1") == 0 {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
	}()
	if _, err := turn(a, cctx, 1); err == nil {
		t.Fatal("the cut-off attempt succeeded")
	}
	_, err = turn(a, ctx, 1)
	wantLost(t, "retry while the first attempt's command still runs", err)
	time.Sleep(3500 * time.Millisecond)
	if n := lines(t, d, id, "/tmp/probe1"); n != 1 {
		t.Fatalf("turn 1's command ran %d times, want once", n)
	}

	// Turn 2 finished and recorded its result; Temporal never heard of it.
	first, err := turn(a, ctx, 2)
	if err != nil || !strings.Contains(first.Preview, "output") {
		t.Fatalf("turn 2: %+v %v", first, err)
	}
	again, err := turn(restarted, ctx, 2)
	if err != nil || again.Preview != first.Preview || again.DurationMs != first.DurationMs || again.Command != first.Command {
		t.Fatalf("retry of a finished turn: %+v %v, want the recorded %+v", again, err, first)
	}
	if n := lines(t, d, id, "/tmp/probe2"); n != 1 {
		t.Fatalf("turn 2's command ran %d times, want once", n)
	}
}
