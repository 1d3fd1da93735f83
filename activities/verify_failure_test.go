package activities

import (
	"errors"
	"testing"

	"github.com/docker/docker/api/types/container"
	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/sandbox"
)

// A verifier whose prepare step failed in what the agent left (its working
// directory removed: exit 1; or killed: 137) is a VerifierError, scored 0 once
// retried; one whose exec could not start the toolchain (126, 127) is the
// host's. Before, every one was an InfraError: an agent that removed its
// working directory got an unscored infra_error and three fresh sandboxes.
func TestPrepareFailedIsTheAgentsUnlessTheToolchainDidNotStart(t *testing.T) {
	for code, want := range map[int]string{1: errs.Verifier, 137: errs.Verifier, -1: errs.Verifier, 126: errs.Infra, 127: errs.Infra} {
		err := prepareFailed("sb", "", sandbox.ExecResult{ExitCode: code, Output: "cd: /app: No such file or directory"})
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != want {
			t.Errorf("exit %d: %v, want %s", code, err, want)
		}
	}
}

// A sandbox found stopped under its verifier is the host's (SandboxGone),
// unless the OOM killer stopped it: the agent can make PID 1 the killer's
// pick (/proc/1/oom_score_adj 1000) and leave the tests a sparse file to
// read into memory, so that is the agent's failure. Before, every stop was
// SandboxGone: unscored, and a fresh sandbox for the agent.
func TestStoppedUnderItsVerifierByTheOOMKillerIsTheAgents(t *testing.T) {
	verr := errs.Verifierf("tests/test.sh exited 137: no results\nmore")
	var ae *temporal.ApplicationError
	errors.As(verr, &ae)
	for _, tc := range []struct {
		st   *container.State
		want string
	}{
		{&container.State{Status: "exited", ExitCode: 137, OOMKilled: true}, errs.Verifier},
		{&container.State{Status: "exited", ExitCode: 137}, errs.SandboxGone},
		{&container.State{Status: "exited", ExitCode: 143}, errs.SandboxGone},
		{nil, errs.SandboxGone},
	} {
		err := stoppedUnder(tc.st, "sb", "tests/test.sh exited 137: no results", ae)
		var got *temporal.ApplicationError
		if !errors.As(err, &got) || got.Type() != tc.want {
			t.Errorf("%+v: %v, want %s", tc.st, err, tc.want)
		}
	}
}
