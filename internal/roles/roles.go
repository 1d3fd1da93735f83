// Package roles registers t1flow's workflows and activities on Temporal
// workers for one role; the worker command and the integration tests share it.
package roles

import (
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/workflows"
)

// Roles a worker can take.
const (
	Control = "control" // workflows and light activities
	Sandbox = "sandbox" // Docker sandboxes on this host
	All     = "all"
)

// Valid names the flag at fault.
func Valid(role string) error {
	switch role {
	case Control, Sandbox, All:
		return nil
	}
	return fmt.Errorf("--role %q: use control, sandbox or all", role)
}

// HasSandbox reports whether the role runs sandboxes.
func HasSandbox(role string) bool { return role == Sandbox || role == All }

// New builds (without starting) the workers of a role. A sandbox role needs
// acts.Docker and acts.Host set.
func New(c client.Client, role string, acts *activities.Activities) []worker.Worker {
	var ws []worker.Worker
	if role == Control || role == All {
		w := worker.New(c, ids.ControlQueue, worker.Options{})
		w.RegisterWorkflow(workflows.RolloutWorkflow)
		w.RegisterWorkflow(workflows.EvalSweepWorkflow)
		w.RegisterWorkflow(workflows.ReaperWorkflow)
		w.RegisterActivity(acts)
		ws = append(ws, w)
	}
	if HasSandbox(role) {
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
