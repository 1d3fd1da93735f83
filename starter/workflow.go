package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/workflows"
)

// runID derives a stable ID from what a run computes, so asking again finds
// it (resuming it after a crash) instead of starting over.
func runID(prefix string, parts ...any) string {
	b, _ := json.Marshal(parts)
	h := sha256.Sum256(b)
	return prefix + "-" + hex.EncodeToString(h[:])[:12]
}

// freshID makes a derived ID unique when --new asks for another run.
func freshID(id string, fresh bool) string {
	if fresh {
		id += "-" + time.Now().UTC().Format("20060102T150405")
	}
	return id
}

// runFlags are the flags that synth and audit share.
type runFlags struct {
	concurrency int
	asJSON      bool
	fresh       bool
	storeDir    string
}

func (r *runFlags) register(fs *flag.FlagSet, concurrency int, concurrencyHelp string) {
	fs.IntVar(&r.concurrency, "concurrency", concurrency, concurrencyHelp)
	fs.BoolVar(&r.asJSON, "json", false, "print one JSON document")
	fs.BoolVar(&r.fresh, "new", false, "start a new run even if one with the same inputs exists")
	fs.StringVar(&r.storeDir, "store", config.StoreDir(), "artifact store")
}

// startOrFind starts a workflow unless one with the same ID is running or
// has completed; a failed, cancelled or terminated one is started afresh.
func startOrFind(ctx context.Context, c client.Client, wid string, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, bool, error) {
	d, err := c.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
	case err != nil:
		return nil, false, err
	default:
		switch d.WorkflowExecutionInfo.Status {
		case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
			enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
			return c.GetWorkflow(ctx, wid, ""), true, nil
		}
	}
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	run, err := c.ExecuteWorkflow(ctx, opts, wf, args...)
	return run, false, err
}

// announce says whether a run was found or started, and links it in the UI.
func announce(w io.Writer, wid string, existing bool, found, started string) {
	if existing {
		fmt.Fprintln(w, found)
	} else {
		fmt.Fprintln(w, started)
	}
	fmt.Fprintf(w, "  %s\n", config.UIURL(wid))
}

// launch is a run to start (or find) on the control queue.
type launch struct {
	wid     string
	summary string // shown in the Temporal UI and when the run starts
	wf, in  any    // the workflow and its input
}

// startRun starts (or finds) a run and announces it.
func startRun(ctx context.Context, c client.Client, l launch, info io.Writer) (client.WorkflowRun, error) {
	run, existing, err := startOrFind(ctx, c, l.wid, client.StartWorkflowOptions{ID: l.wid, TaskQueue: ids.ControlQueue, StaticSummary: l.summary}, l.wf, l.in)
	if err != nil {
		return nil, err
	}
	announce(info, l.wid, existing, fmt.Sprintf("found existing run %s (resuming or reporting it; use --new for another)", l.wid), l.wid+": "+l.summary)
	return run, nil
}

// finished is a run's result and report as a command prints them.
type finished interface {
	// targets are where the result and then the report decode to; report
	// points into the result, at the report's reference.
	targets() (res any, report *store.Ref, rep any)
	printJSON(w io.Writer, wid string) error
	print(w io.Writer)
}

// followRun starts (or finds) a run, waits for it with progress ("N/M
// noun"), reads its report and prints it: as one JSON document or as text.
func followRun(ctx context.Context, st store.Store, l launch, noun string, asJSON bool, out finished, stdout, stderr io.Writer) error {
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	run, err := startRun(ctx, c, l, infoOut(asJSON, stdout, stderr))
	if err != nil {
		return err
	}
	res, report, rep := out.targets()
	if err := waitWithProgress(ctx, c, run, stderr, noun, res); err != nil {
		return err
	}
	if err := store.GetJSON(ctx, st, *report, rep); err != nil {
		return err
	}
	if asJSON {
		err = out.printJSON(stdout, run.GetID())
	} else {
		out.print(stdout)
	}
	if f, ok := out.(interface{ failure() error }); ok && err == nil {
		err = f.failure()
	}
	return err
}

// waitWithProgress waits for a sweep-like workflow, printing its "progress"
// query as a line that updates (a line per change when not on a terminal).
func waitWithProgress(ctx context.Context, c client.Client, run client.WorkflowRun, stderr io.Writer, noun string, res any) error {
	done := make(chan error, 1)
	go func() { done <- getResult(ctx, run, res) }()
	tty := isTerminal(stderr)
	last := ""
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case err := <-done:
			if tty && last != "" {
				fmt.Fprintln(stderr)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", run.GetID(), err)
			}
			return nil
		case <-t.C:
			v, err := c.QueryWorkflow(ctx, run.GetID(), "", workflows.QueryProgress)
			if err != nil {
				continue
			}
			var p workflows.Progress
			if v.Get(&p) != nil {
				continue
			}
			counts := fmt.Sprintf("%d/%d %s, %d running, %d good", p.Done, p.Total, noun, p.Running, p.Resolved)
			line := fmt.Sprintf("%s, %s elapsed", counts, time.Since(start).Round(time.Second))
			if p.Done > 0 && p.Done < p.Total {
				eta := time.Duration(float64(time.Since(start)) / float64(p.Done) * float64(p.Total-p.Done))
				line += fmt.Sprintf(", ETA %s", eta.Round(time.Second))
			}
			if tty {
				fmt.Fprintf(stderr, "\r%-100s", line)
			} else if counts != last {
				fmt.Fprintln(stderr, line) // off a terminal, a line only when the counts change
			}
			last = counts
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
