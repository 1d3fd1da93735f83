package main

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
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
