package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

// scaleOpts: an eval sweep of n rollouts (tasks × attempts) over the sleep
// sandbox backend, concurrency at a time.
type scaleOpts struct {
	n, tasks, concurrency int
	sleep                 time.Duration
	// dbFile keeps the dev server's SQLite in a file (1 GiB page cache)
	// instead of in memory, where it grows ~0.13 MB per rollout (~13 GB at
	// 100,000); measured ~40% slower here.
	dbFile bool
}

// runScaleOnly measures orchestration alone: a dev server, an in-process
// worker of the control and sandbox roles with the sleep backend (no
// Docker, no GPU), one eval sweep of o.n rollouts by task manifest. It
// reports rollouts/s, the sweep's runs with their history events and
// bytes, one rollout's history and the process's peak memory, and splices
// the "## Scale" section into out.
func runScaleOnly(out string, o scaleOpts) error {
	sec, err := benchScale(context.Background(), o)
	if err != nil {
		return err
	}
	fmt.Print(sec)
	return spliceSection(out, scaleHeading, sec)
}

// scaleHeading is the heading of the scale figures.
const scaleHeading = "## Scale: eval sweeps that continue as new"

// benchScale runs the scale sweep and returns its section.
func benchScale(ctx context.Context, o scaleOpts) (string, error) {
	if _, err := activities.CheckSleepBackend(activities.SleepBackend); err != nil {
		return "", err
	}
	if o.n < 1 || o.tasks < 1 || o.concurrency < 1 || o.n%min(o.tasks, o.n) != 0 {
		return "", fmt.Errorf("-scale-n %d, -scale-tasks %d, -scale-concurrency %d: all at least 1, n a multiple of tasks", o.n, o.tasks, o.concurrency)
	}
	tmp, err := os.MkdirTemp("", "t1flow-bench-scale-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	st, err := store.NewLocal(filepath.Join(tmp, "store"))
	if err != nil {
		return "", err
	}
	var db []string
	if o.dbFile {
		// WAL and no fsync: the bench measures orchestration, not the disk.
		db = []string{"--db-filename", filepath.Join(tmp, "temporal.db"), "--sqlite-pragma", "journal_mode=wal",
			"--sqlite-pragma", "synchronous=off", "--sqlite-pragma", "cache_size=-1048576"}
	}
	dev, err := startDevServer(ctx, testenv.StateDir(), db...)
	if err != nil {
		return "", err
	}
	defer dev.Stop()
	// The SDK's default logger writes every command at DEBUG: at thousands
	// of rollouts that is most of the worker's CPU.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.Dial(client.Options{HostPort: dev.FrontendHostPort(), Logger: log.NewStructuredLogger(quiet)})
	if err != nil {
		return "", err
	}
	defer c.Close()
	acts := &activities.Activities{Store: st, Temporal: c, Host: fmt.Sprintf("scale-%d", os.Getpid()), Sleep: o.sleep}
	ws := roles.New(c, roles.Control+","+roles.Sandbox, acts)
	if err := roles.Start(ws); err != nil {
		return "", err
	}
	defer roles.Stop(ws)
	tasks := min(o.tasks, o.n)
	manifest, err := scaleManifest(ctx, st, tasks)
	if err != nil {
		return "", err
	}
	sweep := fmt.Sprintf("scale-%d", time.Now().UnixNano())
	in := workflows.EvalSweepInput{SweepID: sweep, TaskManifest: &manifest, Attempts: o.n / tasks, Concurrency: o.concurrency,
		Agent: activities.AgentSpec{Kind: activities.AgentNop}}
	var peak atomic.Uint64
	stopMem := sampleMemory(&peak)
	t0 := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids.EvalSweepWorkflowID(sweep), TaskQueue: ids.ControlQueue}, workflows.EvalSweepWorkflow, in)
	if err != nil {
		return "", err
	}
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
	done := make(chan error, 1)
	var res workflows.EvalSweepResult
	go func() { done <- run.Get(ctx, &res) }()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-progress.C:
			fmt.Fprintf(os.Stderr, "bench scale: %s, %s\n", time.Since(t0).Round(time.Second), scaleProgress(ctx, c, sweep))
		}
	}
	wall := time.Since(t0)
	stopMem()
	if err != nil {
		return "", fmt.Errorf("sweep %s after %s: %w", sweep, wall, err)
	}
	return scaleSection(ctx, c, o, res, sweep, wall, peak.Load())
}

// scaleManifest stores one placeholder bundle (the sleep backend never
// opens it) and a manifest of n tasks naming it.
func scaleManifest(ctx context.Context, st store.Store, n int) (store.Ref, error) {
	bundle, err := st.Put(ctx, "tasks/scale-placeholder.tar", bytes.NewReader([]byte("sleep backend")))
	if err != nil {
		return store.Ref{}, err
	}
	p := task.Pool{Name: "scale"}
	for i := 0; i < n; i++ {
		p.Tasks = append(p.Tasks, task.Ref{ID: fmt.Sprintf("%016x", i), Name: fmt.Sprintf("scale-%06d", i), Category: "scale", Bundle: bundle})
	}
	return store.PutJSON(ctx, st, "manifests/scale.json", p)
}

func scaleProgress(ctx context.Context, c client.Client, sweep string) string {
	v, err := c.QueryWorkflow(ctx, ids.EvalSweepWorkflowID(sweep), "", workflows.QueryProgress)
	if err != nil {
		return err.Error()
	}
	var p workflows.Progress
	if err := v.Get(&p); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d/%d done, %d running", p.Done, p.Total, p.Running)
}

// sampleMemory keeps the peak of this process's resident memory (the
// worker's; the dev server is another process) until stopped.
func sampleMemory(peak *atomic.Uint64) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if rss := residentBytes(); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(stop) }
}

func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.Sys
	}
	for _, l := range strings.Split(string(b), "\n") {
		var kb uint64
		if _, err := fmt.Sscanf(l, "VmRSS: %d kB", &kb); err == nil {
			return kb * 1024
		}
	}
	return 0
}

func scaleSection(ctx context.Context, c client.Client, o scaleOpts, res workflows.EvalSweepResult, sweep string, wall time.Duration, peak uint64) (string, error) {
	wid := ids.EvalSweepWorkflowID(sweep)
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", wid), PageSize: 1000})
	if err != nil {
		return "", err
	}
	runs, maxEv, maxBytes, sumEv, sumBytes := len(resp.Executions), 0, 0, 0, 0
	for _, e := range resp.Executions {
		n, b, _, _, err := historySize(ctx, c, wid, e.Execution.RunId)
		if err != nil {
			return "", err
		}
		maxEv, maxBytes, sumEv, sumBytes = max(maxEv, n), max(maxBytes, b), sumEv+n, sumBytes+b
	}
	var rolloutEv, rolloutBytes int
	if res.Summary.Rollouts > 0 {
		rid := ids.RolloutID(sweep, "eval", 0, fmt.Sprintf("%016x", 0), 1)
		rolloutEv, rolloutBytes, _, _, _ = historySize(ctx, c, ids.RolloutWorkflowID(rid), "")
	}
	db := "SQLite in memory"
	if o.dbFile {
		db = "SQLite in a file, WAL, synchronous=off"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", scaleHeading)
	fmt.Fprintf(&b, "`make bench-scale` (`bench -only scale`): one eval sweep of %d rollouts (%d tasks by manifest × %d attempts), %d at a time, "+
		"on the dev server (%s) with an in-process worker (control and sandbox roles) over the sleep sandbox backend (each sandbox activity sleeps %s; no Docker, no GPU), on %d CPUs shared with other work. "+
		"The sweep continues as new every %d rollouts it starts.\n\n", o.n, min(o.tasks, o.n), o.n/min(o.tasks, o.n), o.concurrency, db, o.sleep, runtime.NumCPU(), workflows.DefaultContinueEvery)
	fmt.Fprintf(&b, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| rollouts done (in the report) | %d (%d scored) |\n", res.Summary.Rollouts, res.Summary.Scored)
	fmt.Fprintf(&b, "| wall time | %s |\n", wall.Round(time.Second))
	fmt.Fprintf(&b, "| orchestration throughput | %.1f rollouts/s |\n", float64(res.Summary.Rollouts)/wall.Seconds())
	fmt.Fprintf(&b, "| sweep runs (continue-as-new chain) | %d |\n", runs)
	fmt.Fprintf(&b, "| history per sweep run: mean / max events | %d / %d |\n", sumEv/max(runs, 1), maxEv)
	fmt.Fprintf(&b, "| history per sweep run: mean / max bytes | %d / %d |\n", sumBytes/max(runs, 1), maxBytes)
	fmt.Fprintf(&b, "| one rollout's history (1 turn) | %d events, %d bytes |\n", rolloutEv, rolloutBytes)
	fmt.Fprintf(&b, "| peak resident memory of the worker process | %.0f MiB |\n", float64(peak)/(1<<20))
	fmt.Fprintf(&b, "\nReport: %s (%d bytes).\n", res.Report.URI, res.Report.Bytes)
	return b.String(), nil
}
