package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/ids"
)

// Every sandbox worker creates its host's reaper schedule and never removes
// it (a restarted worker finds it); a host taken out of service for good
// would keep a schedule whose runs wait for a worker that never comes. `hosts
// list` shows each host's schedule and whether a worker polls its queue;
// `hosts retire NAME` deletes a host's schedule, refusing while a worker
// still polls it (that worker would also create it again when it restarts).

const hostsUsage = "hosts list | hosts retire NAME [--force]"

func hostsCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "retire") {
		return badInput(fmt.Errorf("usage: starter %s", hostsUsage))
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if args[0] == "list" {
		return hostsList(ctx, c, stdout)
	}
	fs := flag.NewFlagSet("hosts retire", flag.ContinueOnError)
	force := fs.Bool("force", false, "retire even while a worker polls the host's queue")
	name, err := parseOne(fs, args[1:], "hosts retire NAME [--force]")
	if err != nil {
		return err
	}
	return hostRetire(ctx, c, ids.Clean(name), *force, stdout)
}

// hostPollers is how many workers poll a sandbox host's own queue now
// (Temporal forgets a stopped worker after a few minutes).
func hostPollers(ctx context.Context, c client.Client, host string) (int, error) {
	resp, err := c.DescribeTaskQueue(ctx, ids.SandboxHostQueue(host), enumspb.TASK_QUEUE_TYPE_ACTIVITY)
	if err != nil {
		return 0, err
	}
	return len(resp.Pollers), nil
}

func hostsList(ctx context.Context, c client.Client, stdout io.Writer) error {
	prefix := ids.ReaperScheduleID("")
	it, err := c.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	if err != nil {
		return err
	}
	var hosts []string
	for it.HasNext() {
		s, err := it.Next()
		if err != nil {
			return err
		}
		if strings.HasPrefix(s.ID, prefix) {
			hosts = append(hosts, strings.TrimPrefix(s.ID, prefix))
		}
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		n, err := hostPollers(ctx, c, h)
		state := fmt.Sprintf("%d worker(s) polling", n)
		if err != nil {
			state = "unknown: " + err.Error()
		} else if n == 0 {
			state = "no worker (retire it with `starter hosts retire " + h + "` if it is gone for good)"
		}
		fmt.Fprintf(stdout, "%s\tschedule %s\t%s\n", h, ids.ReaperScheduleID(h), state)
	}
	if len(hosts) == 0 {
		fmt.Fprintln(stdout, "no sandbox host has a reaper schedule")
	}
	return nil
}

func hostRetire(ctx context.Context, c client.Client, host string, force bool, stdout io.Writer) error {
	n, err := hostPollers(ctx, c, host)
	if err != nil {
		return err
	}
	if n > 0 && !force {
		return fmt.Errorf("host %s: %d worker(s) still poll %s; stop them first (a sandbox worker creates its reaper schedule again when it starts), or --force",
			host, n, ids.SandboxHostQueue(host))
	}
	err = c.ScheduleClient().GetHandle(ctx, ids.ReaperScheduleID(host)).Delete(ctx)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return badInput(fmt.Errorf("host %s has no reaper schedule %s (`starter hosts list` shows them)", host, ids.ReaperScheduleID(host)))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "host %s retired: reaper schedule %s deleted\n", host, ids.ReaperScheduleID(host))
	return nil
}
