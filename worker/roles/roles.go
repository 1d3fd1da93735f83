// Package roles registers t1flow's workflows and activities on Temporal
// workers for one role; the worker command, the test environment and the
// benchmarks share it, so every worker serves the same names.
package roles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/workflows"
	"github.com/t1flow/t1flow/workflows/sweepstore"
)

// Roles a worker can take; a worker may take several ("control,sandbox").
const (
	Control = "control" // workflows and light activities
	Sandbox = "sandbox" // Docker sandboxes on this host
	GPU     = "gpu"     // trainer and inference processes on this host
	All     = "all"     // all three
)

// DefaultStopTimeout is how long a stopping worker (SIGTERM) lets running
// activities finish: trainer operations, image builds, turns. Past it their
// contexts are cancelled, and each hands its work back retryable (a trainer
// step rolls back; a cancelled image build is an InfraError, never
// task_invalid), to be retried on another worker.
const DefaultStopTimeout = 5 * time.Minute

// StopTimeout is every worker's worker.Options.WorkerStopTimeout; the
// worker command's -stop-timeout flag sets it before building its workers.
var StopTimeout = DefaultStopTimeout

// opts are the options of every worker, with at most n activities at once
// (0: the SDK's default).
func opts(n int) worker.Options {
	return worker.Options{MaxConcurrentActivityExecutionSize: n, WorkerStopTimeout: StopTimeout}
}

// Set is the roles one worker process takes.
type Set map[string]bool

// Parse reads a --role value, naming the flag at fault.
func Parse(v string) (Set, error) {
	s := Set{}
	for _, r := range strings.Split(v, ",") {
		switch r = strings.TrimSpace(r); r {
		case Control, Sandbox, GPU:
			s[r] = true
		case All:
			s[Control], s[Sandbox], s[GPU] = true, true, true
		default:
			return nil, fmt.Errorf("--role %q: %q is not a role (use control, sandbox, gpu, all, or a comma-separated list)", v, r)
		}
	}
	return s, nil
}

// New builds (without starting) the control and sandbox workers of a role
// (the GPU role's worker comes from NewGPU once its processes run). A sandbox role needs
// acts.Docker and acts.Host set.
func New(c client.Client, role string, acts *activities.Activities) []worker.Worker {
	set, err := Parse(role)
	if err != nil {
		panic(err)
	}
	var ws []worker.Worker
	if set[Control] {
		w := worker.New(c, ids.ControlQueue, opts(0))
		workflows.Register(w)
		w.RegisterActivity(acts)
		w.RegisterActivity(&sweepstore.Activities{Store: acts.Store, Temporal: acts.Temporal})
		ws = append(ws, w)
	}
	if set[Sandbox] {
		// Creation may go to any sandbox host; everything after it goes to the
		// host that owns the container.
		shared := worker.New(c, ids.SandboxQueue, opts(16))
		shared.RegisterActivity(acts)
		host := worker.New(c, ids.SandboxHostQueue(acts.Host), opts(256))
		host.RegisterActivity(acts)
		ws = append(ws, shared, host)
	}
	return ws
}

// NewGPU builds (without starting) the workers of the GPU queues for the
// activities of running trainer and inference processes: the shared queue,
// where a campaign claims a trainer, and, for a named trainer, its own queue,
// where the campaigns pinned to it call (gpu/pin.go).
func NewGPU(c client.Client, acts *gpu.Activities) []worker.Worker {
	if acts.Running == nil {
		acts.Running = campaignRunning(c)
	}
	// A few at a time: each call holds a trainer or inference process.
	w := worker.New(c, ids.GPUQueue, opts(4))
	w.RegisterActivity(acts)
	ws := []worker.Worker{w}
	if acts.Name != "" {
		own := worker.New(c, ids.TrainerQueue(acts.Name), opts(4))
		own.RegisterActivity(acts)
		ws = append(ws, own)
	}
	return ws
}

// campaignRunning asks Temporal whether a campaign's workflow still runs
// (the trainer's lease is free once its holder ended, however it ended).
func campaignRunning(c client.Client) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, name string) (bool, error) {
		d, err := c.DescribeWorkflowExecution(ctx, ids.CampaignWorkflowID(name), "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
	}
}

// Start starts every worker, stopping those already started if one fails.
func Start(ws []worker.Worker) error {
	for i, w := range ws {
		if err := w.Start(); err != nil {
			for _, s := range ws[:i] {
				s.Stop()
			}
			return err
		}
	}
	return nil
}

// Stop stops every worker.
func Stop(ws []worker.Worker) {
	for _, w := range ws {
		w.Stop()
	}
}
