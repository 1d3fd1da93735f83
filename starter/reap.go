package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/workflows"
)

// reap runs the reaper for one sandbox host now, under an ID of its own so it
// never collides with the host's scheduled reaper.
func reap(ctx context.Context, args []string, stdout io.Writer) error {
	hostname, _ := os.Hostname()
	fs := flag.NewFlagSet("reap", flag.ContinueOnError)
	host := fs.String("host", hostname, "sandbox host")
	ttl := fs.Duration("ttl", workflows.DefaultReaperTTLSec*time.Second, "remove containers older than this")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	h := ids.Clean(*host)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        fmt.Sprintf("%s-manual-%d", ids.ReaperWorkflowID(h), time.Now().UnixNano()),
		TaskQueue: ids.ControlQueue,
	}, workflows.ReaperWorkflow, workflows.ReaperInput{Host: h, TTLSec: ttl.Seconds()})
	if err != nil {
		return err
	}
	var res activities.ReapResult
	if err := run.Get(ctx, &res); err != nil {
		return err
	}
	for _, r := range res.Removed {
		fmt.Fprintln(stdout, "removed", r)
	}
	for _, r := range res.Cancelled {
		fmt.Fprintln(stdout, "cancelled", r)
	}
	fmt.Fprintf(stdout, "reaper on %s: %d removed, %d kept, %d orphaned rollouts cancelled\n", h, len(res.Removed), res.Kept, len(res.Cancelled))
	return nil
}
