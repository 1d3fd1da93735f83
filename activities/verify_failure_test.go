package activities

import (
	"errors"
	"testing"

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
