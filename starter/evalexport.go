package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/harborout"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
	"github.com/t1flow/t1flow/workflows/sweepstore"
)

// evalExport writes a sweep's latest report (its last resume round's, else
// its own) as Harbor's job directory: DIR/result.json, and per rollout
// DIR/<task>__<attempt>/result.json and agent/trajectory.json.
func evalExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval export", flag.ContinueOnError)
	dir := fs.String("dir", "", "the job directory to write (new or empty)")
	source := fs.String("source", "", "the dataset name trials are filed under (default: adhoc, as Harbor)")
	storeDir := fs.String("store", config.StoreDir(), "artifact store directory")
	check := fs.Bool("check", false, "then load the files with harbor's own models (needs Harbor's env, make harborenv)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return badInput(errors.New("eval export: give one sweep ID: starter eval export SWEEP --dir DIR"))
	case *dir == "":
		return badInput(errors.New("eval export: --dir is empty: name the job directory to write"))
	}
	sweep := strings.TrimPrefix(pos[0], "eval/")
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	rep, _, round, err := sweepstore.LatestReport(ctx, st, sweep)
	if errors.Is(err, store.ErrNotFound) {
		return badInput(fmt.Errorf("eval export %s: no report in %s (a sweep still running, failed or cancelled has none: wait, or --resume it): %v", sweep, *storeDir, err))
	}
	if err != nil {
		return err
	}
	times := sweepTimes(ctx, sweep, round, rep.Rollouts, stderr)
	j, err := sweepstore.HarborJob(ctx, st, rep, *source, times)
	if err != nil {
		return fmt.Errorf("eval export %s: %w", sweep, err)
	}
	if err := harborout.Write(*dir, j); err != nil {
		return badInput(err)
	}
	fmt.Fprintf(stdout, "wrote %d trials of sweep %s (report round %d) to %s\n", len(j.Trials), sweep, round, *dir)
	if !*check {
		return nil
	}
	got, err := harborout.Check(ctx, harbor.Python(), *dir)
	if err != nil {
		return fmt.Errorf("eval export: harbor rejects %s: %w", *dir, err)
	}
	fmt.Fprintf(stdout, "harbor reads %d trials, %d errored, metrics %v\n", len(got.Trials), got.NErroredTrials, got.Metrics)
	return nil
}

// sweepTimes are the times Temporal has for the sweep and its rollouts; a
// Temporal that cannot be reached leaves them unknown (the job's start is
// then now).
func sweepTimes(ctx context.Context, sweep string, round int, rs []workflows.RolloutResult, stderr io.Writer) sweepstore.HarborTimes {
	times := sweepstore.HarborTimes{Rollouts: map[string][2]time.Time{}}
	c, err := dial(ctx)
	if err == nil {
		defer c.Close()
		times.Started, times.Finished = workflowTimes(ctx, c, ids.EvalSweepWorkflowID(sweep))
		if round > 0 {
			_, times.Finished = workflowTimes(ctx, c, ids.EvalResumeWorkflowID(sweep, round))
		}
		for _, r := range rs {
			if s, f := workflowTimes(ctx, c, r.WorkflowID); !s.IsZero() {
				times.Rollouts[r.WorkflowID] = [2]time.Time{s, f}
			}
		}
	}
	if times.Started.IsZero() {
		fmt.Fprintf(stderr, "eval export: no times from Temporal for %s (%v): the job's started_at is now\n", sweep, err)
		times.Started = time.Now()
	}
	return times
}

// workflowTimes is a workflow's start and close time (zero where unknown).
func workflowTimes(ctx context.Context, c client.Client, wid string) (time.Time, time.Time) {
	d, err := c.DescribeWorkflowExecution(ctx, wid, "")
	if err != nil {
		return time.Time{}, time.Time{}
	}
	info := d.GetWorkflowExecutionInfo()
	var s, f time.Time
	if info.GetStartTime() != nil {
		s = info.GetStartTime().AsTime()
	}
	if info.GetCloseTime() != nil {
		f = info.GetCloseTime().AsTime()
	}
	return s, f
}
