package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/workflows"
)

// awaitRetry is how long getResult waits before asking again after the
// server did not answer.
var awaitRetry = 2 * time.Second

// getResult is run.Get that outlives a server that stops answering for a
// while (a loaded or restarting frontend answers a long poll with
// DEADLINE_EXCEEDED or UNAVAILABLE): `--wait` on an hour-long campaign must
// not die of one slow poll while the workflow runs on. It gives up only when
// ctx ends or the workflow's own outcome is an error.
func getResult(ctx context.Context, run client.WorkflowRun, res any) error {
	for {
		err := run.Get(ctx, res)
		if err == nil || ctx.Err() != nil || !transientRPC(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(awaitRetry):
		}
	}
}

// transientRPC: the server did not answer, which says nothing of the workflow.
func transientRPC(err error) bool {
	var dl *serviceerror.DeadlineExceeded
	var un *serviceerror.Unavailable
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &dl) || errors.As(err, &un)
}

// pausePoll is how often awaitCampaign asks whether the campaign paused.
var pausePoll = 5 * time.Second

// awaitCampaign is getResult for a campaign, which does not end when a stage
// fails: it pauses until an operator retries, skips or cancels the stage.
// `campaign start --wait` then returns the failure and the decision it waits
// for, instead of waiting in silence on a decision no one was told about
// (make demo with a warm-up gate that missed). The campaign stays paused,
// durable, for that decision.
func awaitCampaign(ctx context.Context, run client.WorkflowRun, status func(context.Context) (workflows.CampaignStatus, error), res any) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- getResult(wctx, run, res) }()
	t := time.NewTicker(pausePoll)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			s, err := status(ctx)
			if err != nil || s.Failure == nil {
				continue // a status the server did not answer says nothing: ask again
			}
			select {
			case err := <-done: // it ended meanwhile (a cancel leaves Failure set): its own outcome
				return err
			default:
			}
			f := s.Failure
			return fmt.Errorf("paused: stage %s failed (%s): %s; it waits for: starter campaign retry|skip|cancel %s", f.Stage, f.Type, f.Reason, s.Name)
		}
	}
}
