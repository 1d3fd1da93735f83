package activities

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/t1flow/t1flow/internal/ids"
)

// SleepBackend, for load tests of orchestration only: when Activities.Sleep
// is set, the sandbox activities start no container, run nothing and
// verify nothing. CreateSandbox, each turn and Verify sleep Sleep and
// return synthetic results (every turn ends the episode; 1 of 2 assertions
// passes), so a sweep exercises Temporal and the workflows and not Docker.
// It is never a default: the worker takes it only with -sandbox-backend
// sleep and T1FLOW_LOAD_TEST=1 (CheckSleepBackend).
const SleepBackend = "sleep"

// LoadTestEnv is the variable that must be "1" for the sleep backend.
const LoadTestEnv = "T1FLOW_LOAD_TEST"

// CheckSleepBackend says whether backend (the worker's -sandbox-backend) is
// allowed here: "docker" always, "sleep" only when explicitly opted in.
func CheckSleepBackend(backend string) (sleep bool, err error) {
	switch backend {
	case "", "docker":
		return false, nil
	case SleepBackend:
		if os.Getenv(LoadTestEnv) != "1" {
			return false, fmt.Errorf("-sandbox-backend sleep runs no sandbox and scores nothing real: it is for load tests only, and needs %s=1", LoadTestEnv)
		}
		return true, nil
	}
	return false, fmt.Errorf("-sandbox-backend %q: use docker (the default) or sleep (load tests, with %s=1)", backend, LoadTestEnv)
}

func (a *Activities) sleep(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(a.Sleep):
		return nil
	}
}

func (a *Activities) sleepCreate(ctx context.Context, in CreateSandboxInput) (CreateSandboxResult, error) {
	if err := a.sleep(ctx); err != nil {
		return CreateSandboxResult{}, err
	}
	name := fmt.Sprintf("sleep-%s-%d", ids.Clean(in.RolloutID), in.SandboxAttempt)
	return CreateSandboxResult{
		Sandbox:         Sandbox{ContainerID: name, Name: name, Host: a.Host, HostQueue: ids.SandboxHostQueue(a.Host)},
		Image:           "sleep",
		AgentTimeoutSec: 600, VerifierTimeoutSec: 60,
	}, nil
}

func (a *Activities) sleepTurn(ctx context.Context, in TurnInput) (TurnResult, error) {
	if err := a.sleep(ctx); err != nil {
		return TurnResult{}, err
	}
	if in.Turn >= a.SleepTurns {
		return TurnResult{Turn: in.Turn, Done: true}, nil
	}
	// A synthetic turn the size of a real one: a full preview.
	return TurnResult{Turn: in.Turn, Command: fmt.Sprintf("synthetic turn %d", in.Turn), DurationMs: a.Sleep.Milliseconds(),
		Preview: strings.Repeat("x", PreviewBytes), OutputBytes: PreviewBytes}, nil
}

func (a *Activities) sleepVerify(ctx context.Context) (VerifyResult, error) {
	if err := a.sleep(ctx); err != nil {
		return VerifyResult{}, err
	}
	return VerifyResult{Format: "sleep", Passed: 1, Total: 2, DurationMs: a.Sleep.Milliseconds()}, nil
}
