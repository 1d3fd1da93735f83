// Package roles registers t1flow's workflows and activities on Temporal
// workers for one role; the worker command, the test environment and the
// benchmarks share it, so every worker serves the same names.
package roles

import (
	"context"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/workflows"
)

// Roles a worker can take; a worker may take several ("control,sandbox").
const (
	Control = "control" // workflows and light activities
	Sandbox = "sandbox" // Docker sandboxes on this host
	GPU     = "gpu"     // trainer and inference processes on this host
	All     = "all"     // all three
)

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
		w := worker.New(c, ids.ControlQueue, worker.Options{})
		workflows.Register(w)
		w.RegisterActivity(acts)
		ws = append(ws, w)
	}
	if set[Sandbox] {
		// Creation may go to any sandbox host; everything after it goes to the
		// host that owns the container.
		shared := worker.New(c, ids.SandboxQueue, worker.Options{MaxConcurrentActivityExecutionSize: 16})
		shared.RegisterActivity(acts)
		host := worker.New(c, ids.SandboxHostQueue(acts.Host), worker.Options{MaxConcurrentActivityExecutionSize: 256})
		host.RegisterActivity(acts)
		ws = append(ws, shared, host)
	}
	return ws
}

// NewGPU builds (without starting) the worker of the GPU queue for the
// activities of running trainer and inference processes.
func NewGPU(c client.Client, acts *gpu.Activities) worker.Worker {
	// A few at a time: each call holds a trainer or inference process.
	w := worker.New(c, ids.GPUQueue, worker.Options{MaxConcurrentActivityExecutionSize: 4})
	if acts.Running == nil {
		acts.Running = campaignRunning(c)
	}
	w.RegisterActivity(acts)
	return w
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
