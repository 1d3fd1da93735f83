package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
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
