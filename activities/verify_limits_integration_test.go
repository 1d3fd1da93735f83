package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/sandbox"
)

// TestVerifyRefusesATerabyteResult: code of the agent's that the tests run
// leaves a sparse file of a terabyte in /logs/verifier. Docker streams its
// holes in full; the worker reads no more than activities.MaxResultsBytes of
// it and the rollout fails as the agent's (a VerifierError naming the cap).
// Before, CopyOut read the whole stream into memory: the worker ran out of
// memory.
func TestVerifyRefusesATerabyteResult(t *testing.T) {
	d, a, ref, id := channelRig(t, `import os as _os
with open("/logs/verifier/big.log", "w") as _f:
    _f.truncate(1 << 40)
`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := a.Verify(ctx, activities.VerifyInput{Sandbox: activities.Sandbox{ContainerID: id, Name: t.Name()}, Task: ref, RolloutID: "terabyte"})
	t.Logf("verify: %.300v", err)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.Verifier || !strings.Contains(err.Error(), "big.log is 1099511627776 bytes") {
		res, _ := d.Exec(ctx, id, "ls -ls /logs/verifier", sandbox.ExecOptions{Timeout: 10 * time.Second, User: "root"})
		t.Fatalf("verify: %v; want a VerifierError refusing big.log (/logs/verifier: %s)", err, res.Output)
	}
}
