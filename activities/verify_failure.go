package activities

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/sandbox"
)

// The verifier runs in the sandbox the agent left, so the agent decides much
// of how it fails: a fifo where the tests read an output hangs them until
// verifier.timeout_sec, a tool test.sh calls deleted makes it write no
// results, a working directory removed keeps it from starting. Each is a
// VerifierError, which the rollout scores at 0 once its retries are spent
// (workflows, GetVersion verifier-error-scored), as Harbor grades a verifier
// timeout. The host failing under the tests is not the agent's: that stays an
// InfraError or SandboxGone, retried and never scored.

// hostProbeTimeout bounds each question hostFailedUnder asks Docker (within
// Verify's 30 s heartbeat timeout); it asks hostProbes times, hostProbeGap
// apart, since a container being killed stops its execs before Docker says
// it stopped.
const (
	hostProbeTimeout = 10 * time.Second
	hostProbes       = 3
	hostProbeGap     = time.Second
)

// hostFailedUnder returns err unless it is a VerifierError that the sandbox's
// host caused: a Docker daemon that does not answer after it is an
// InfraError, a sandbox that stopped or is gone (a daemon restart, the
// container killed) SandboxGone. in names the container the tests ran in.
func (a *Activities) hostFailedUnder(ctx context.Context, in VerifyInput, err error) error {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != errs.Verifier {
		return err
	}
	what, _, _ := strings.Cut(ae.Message(), "\n")
	for probe := 1; ; probe++ {
		heartbeat.Record(ctx, "verifying")
		pctx, cancel := context.WithTimeout(ctx, hostProbeTimeout)
		ins, ierr := a.Docker.Client.ContainerInspect(pctx, in.Sandbox.ContainerID)
		cancel()
		if ierr != nil {
			return sandboxErr(ierr, "inspect %s after its verifier failed (%s)", in.Sandbox.Name, what)
		}
		if ins.State == nil || !ins.State.Running {
			return stoppedUnder(ins.State, in.Sandbox.Name, what, ae)
		}
		if probe == hostProbes {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(hostProbeGap):
		}
	}
}

// stoppedUnder judges a sandbox found stopped under its verifier (verr).
// Stopped by a daemon restart or the host: SandboxGone, never scored.
// Stopped by the OOM killer (State.OOMKilled) within the sandbox's own memory
// limit: what the agent left decides what the tests take (a sparse file they
// read whole), and root in the sandbox can make PID 1 the one the killer
// picks (/proc/1/oom_score_adj 1000), so that is the agent's failure, a
// VerifierError, as the same tests failing alone would be.
func stoppedUnder(st *container.State, name, what string, verr *temporal.ApplicationError) error {
	if st != nil && st.OOMKilled {
		return errs.Verifierf("%s ran out of memory under its verifier and stopped (OOMKilled, exit %d): the agent's failure; %s", name, st.ExitCode, verr.Message())
	}
	return errs.SandboxGonef("%s stopped under its verifier (%s): not the agent's failure", name, what)
}

// prepareFailed is a ToolchainRunCmd that never said it was ready: test.sh
// did not start. Its first steps empty /tests and the verifier's places and
// enter the working directory, so what the agent left there (the directory
// removed, a file in its place) stops them: a VerifierError. An exec that
// could not start the toolchain at all (126, 127) is the host's.
func prepareFailed(name, workDir string, er sandbox.ExecResult) error {
	if er.ExitCode == 126 || er.ExitCode == 127 {
		return errs.Infraf("start the sealed verifier in %s: exit %d: %s", name, er.ExitCode, er.Output)
	}
	if workDir == "" {
		workDir = "/"
	}
	return errs.Verifierf("prepare the verifier in %s (empty /tests and %s, enter the working directory %s): exit %d, tests/test.sh did not run: %s",
		name, VerifierDir, workDir, er.ExitCode, er.Output)
}

// What readResults copies out of VerifierDir: each file up to
// MaxResultFileBytes, and the whole tar stream up to MaxResultsBytes (four
// such files and their headers), read no further: the tests may leave a
// sparse file of a terabyte there, which Docker streams in full. Over either
// is the agent's failure.
const (
	MaxResultFileBytes = 4 << 20
	MaxResultsBytes    = 4*MaxResultFileBytes + 64<<10
)
