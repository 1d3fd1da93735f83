package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/workflows"
)

// flakyRun answers Get with errs, one per call, then with the result.
type flakyRun struct {
	client.WorkflowRun
	errs  []error
	calls int
}

func (r *flakyRun) Get(_ context.Context, res any) error {
	r.calls++
	if len(r.errs) > 0 {
		err := r.errs[0]
		r.errs = r.errs[1:]
		return err
	}
	*res.(*string) = "done"
	return nil
}

func TestGetResultOutlivesAServerThatStopsAnswering(t *testing.T) {
	awaitRetry = time.Millisecond
	run := &flakyRun{errs: []error{
		fmt.Errorf("poll: %w", context.DeadlineExceeded),
		serviceerror.NewDeadlineExceeded("long poll"),
		serviceerror.NewUnavailable("frontend restarting"),
	}}
	var res string
	if err := getResult(context.Background(), run, &res); err != nil || res != "done" || run.calls != 4 {
		t.Fatalf("after 3 unanswered polls: res %q, %d calls, err %v", res, run.calls, err)
	}
}

func TestGetResultReturnsTheWorkflowsOwnError(t *testing.T) {
	awaitRetry = time.Millisecond
	failed := temporal.NewApplicationError("campaign failed", "BadInput")
	run := &flakyRun{errs: []error{failed}}
	var res string
	if err := getResult(context.Background(), run, &res); !errors.Is(err, failed) || run.calls != 1 {
		t.Fatalf("a workflow failure must end the wait at once: %d calls, err %v", run.calls, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run = &flakyRun{errs: []error{context.Canceled, context.Canceled}}
	if err := getResult(ctx, run, &res); err == nil || run.calls != 1 {
		t.Fatalf("an ended context must end the wait: %d calls, err %v", run.calls, err)
	}
}

// blockedRun is a campaign that never ends on its own (paused): Get returns
// only when the wait is called off.
type blockedRun struct {
	client.WorkflowRun
	ended chan struct{}
}

func (r *blockedRun) Get(ctx context.Context, _ any) error {
	<-ctx.Done()
	close(r.ended)
	return ctx.Err()
}

// A campaign paused on a failed stage never completes: `campaign start
// --wait` must say so, with the failure and the decision it waits for,
// instead of waiting in silence; one that completes returns its result.
func TestWaitOnACampaignEndsWhenItPauses(t *testing.T) {
	defer func(d time.Duration) { pausePoll = d }(pausePoll)
	pausePoll = time.Millisecond
	asked := 0
	status := func(context.Context) (workflows.CampaignStatus, error) {
		asked++
		switch asked {
		case 1:
			return workflows.CampaignStatus{}, serviceerror.NewUnavailable("frontend restarting")
		case 2:
			return workflows.CampaignStatus{Name: "c", Phase: workflows.PhaseWarmup}, nil
		}
		return workflows.CampaignStatus{Name: "c", Failure: &workflows.StageFailure{Stage: "warmup", Type: "WarmupGate", Reason: "held-out explained variance 0.691 below the gate 0.700"}}, nil
	}
	run := &blockedRun{ended: make(chan struct{})}
	err := awaitCampaign(context.Background(), run, status, new(string))
	if err == nil || asked != 3 {
		t.Fatalf("paused campaign: err %v after %d status queries, want an error at the third", err, asked)
	}
	for _, want := range []string{"stage warmup failed (WarmupGate)", "0.691 below the gate", "starter campaign retry|skip|cancel c"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	select {
	case <-run.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait for the result was left running")
	}
	var res string
	err = awaitCampaign(context.Background(), &flakyRun{}, func(context.Context) (workflows.CampaignStatus, error) {
		return workflows.CampaignStatus{Name: "c"}, nil
	}, &res)
	if err != nil || res != "done" {
		t.Fatalf("a campaign that completes: res %q, err %v", res, err)
	}
}
