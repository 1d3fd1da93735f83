package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/steptime"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/sandbox"
)

// The steps of Verify, as timed under a steptime.Clock (the benchmark's
// per-step breakdown).
const (
	StepFetchTask   = "fetch task"
	StepInspect     = "inspect"
	StepKill        = "first exec: stop agent processes"
	StepSurveyAgain = "first exec gave no answer: wait, try again"
	StepTamperCheck = "tamper check"
	StepSnapshot    = "live verifier: commit and start"
	StepCopyTests   = "copy tests in"
	StepTestSh      = "test.sh exec"
	StepResults     = "copy results out"
	StepArtifacts   = "copy artifacts out"
)

// VerifySteps are Verify's steps in the order they run.
var VerifySteps = []string{StepFetchTask, StepInspect, StepKill, StepTamperCheck, StepSnapshot, StepCopyTests, StepTestSh, StepResults, StepArtifacts}

// Verify scores the agent phase with the sealed verifier
// (docs/verification.md): every agent process is stopped, the sandbox's
// filesystem is compared with its image (a change verification depends on
// makes the rollout tampered and the tests never run), the held-out tests are
// copied in, and tests/test.sh runs under the read-only toolchain's shell,
// interpreter and pytest. When the agent's processes serve a socket (a
// service solve.sh started), they are frozen instead of stopped, checked,
// snapshotted and left serving, and the tests run in a container of their
// own made from the snapshot, on the sandbox's network
// (Docker.StartLiveVerifier). A verifier that crashes, times out, writes
// nothing or whose test runner never started is a VerifierError, scored 0
// once retried, unless its host failed under it (verify_failure.go).
func (a *Activities) Verify(ctx context.Context, in VerifyInput) (VerifyResult, error) {
	if a.Sleep > 0 {
		return a.sleepVerify(ctx)
	}
	end := steptime.Start(ctx, StepFetchTask)
	t, err := a.fetchTask(ctx, in.Task)
	end()
	if err != nil {
		return VerifyResult{}, err
	}
	id := in.Sandbox.ContainerID
	var vr VerifyResult
	end = steptime.Start(ctx, StepInspect)
	ins, err := a.verifiable(ctx, id, &vr)
	end()
	if err != nil {
		return VerifyResult{}, sandboxErr(err, "inspect %s", in.Sandbox.Name)
	}
	if !sandbox.HasToolchain(ins.Mounts) {
		// Made before the toolchain was wired in: only a fresh sandbox can
		// be verified sealed.
		return VerifyResult{}, errs.SandboxGonef("%s: %v", in.Sandbox.Name, sandbox.ErrToolchainMissing)
	}
	// Nothing of the agent's may run while the filesystem is checked: the
	// survey stops every agent process, unless they serve a socket the tests
	// may talk to; then they are frozen for the check and the snapshot, and
	// the verifier runs beside them in a container of its own.
	end = steptime.Start(ctx, StepKill)
	serving, refused, err := a.survey(ctx, id)
	end()
	vr.LiveRefused = refused
	if err != nil {
		return VerifyResult{}, sandboxErr(err, "stop the agent's processes in %s", in.Sandbox.Name)
	}
	var thaw func(context.Context) error
	if serving > 0 {
		if thaw, err = a.freezeForLive(ctx, ins, serving, &vr); err != nil {
			return VerifyResult{}, sandboxErr(err, "freeze %s", in.Sandbox.Name)
		}
		if thaw == nil {
			serving = 0
		} else {
			defer thaw(context.WithoutCancel(ctx))
		}
	}
	end = steptime.Start(ctx, StepTamperCheck)
	stop := heartbeat.Every(ctx, 5*time.Second, nil) // the agent's files set its length: unbeaten, an infra failure and another try
	findings, err := sandbox.TamperCheck(ctx, a.Docker.Client, ins, a.Docker.Debs())
	stop()
	end()
	if err != nil {
		return VerifyResult{}, sandboxErr(err, "tamper check of %s", in.Sandbox.Name)
	}
	if len(findings) > 0 {
		vr.Tampered = findings
		return vr, nil
	}
	if serving > 0 {
		remove, err := a.startLive(ctx, ins, thaw, &in)
		if err != nil {
			return VerifyResult{}, err
		}
		defer remove()
	}
	vr, err = a.runAndJudge(ctx, in, t, ins, vr)
	return vr, a.hostFailedUnder(ctx, in, err)
}

// runAndJudge runs tests/test.sh sealed in the checked sandbox (or its live
// verifier) and judges its results against the runner's channel.
func (a *Activities) runAndJudge(ctx context.Context, in VerifyInput, t *task.Task, ins container.InspectResponse, vr VerifyResult) (VerifyResult, error) {
	timeout := in.TimeoutSec
	if timeout <= 0 {
		timeout = t.Config.VerifierTimeoutSec
	}
	var user string // root, for a sandbox from before the image-user label
	if img, ok := sandbox.ImageUser(ins); ok {
		user = sandbox.VerifierUser(t.Config.VerifierUser, img)
	}
	// The runner authenticates what it reports against this verification's
	// key (sandbox.ChannelKey): its public share goes in test.sh's
	// environment, after the task's verifier.env, so it is the one the
	// runner reads.
	key, err := sandbox.NewChannelKey()
	if err != nil {
		return VerifyResult{}, errs.Infraf("channel key: %v", err)
	}
	cmd, dropped := sandbox.ToolchainVerifyCmd(ins.Config.Env, append(envList(t.Config.VerifierEnv), key.Env()),
		time.Duration(timeout*float64(time.Second)), sandbox.ToolchainPytestIni(filepath.Join(t.Dir, "tests")), user)
	vr.DroppedEnv = dropped
	er, channel, err := a.runSealed(ctx, in, t, ins.Config.WorkingDir, user, cmd, time.Duration(timeout*float64(time.Second)), key)
	if err != nil {
		return VerifyResult{}, err
	}
	preview := er.Output
	if len(preview) > 2*PreviewBytes {
		preview = preview[len(preview)-2*PreviewBytes:]
	}
	if er.TimedOut {
		return VerifyResult{}, errs.Verifierf("tests/test.sh timed out after %.0fs (verifier.timeout_sec); output tail:\n%s", timeout, preview)
	}
	end := steptime.Start(ctx, StepResults)
	res, err := a.readResults(ctx, in, t, er, preview)
	end()
	if err != nil {
		return VerifyResult{}, err
	}
	if channel.Unauthenticated {
		fmt.Fprintf(a.Docker.Log, "sandbox: %s: the runner's channel carried no authenticated line (a toolchain from before the channel was authenticated?): its lines were believed as they came\n", in.Sandbox.Name)
	}
	if channelSeen != nil {
		channelSeen(channel)
	}
	res.Tampered, res.StorageLimit, res.DroppedEnv = RunnerDisagrees(res, channel), vr.StorageLimit, vr.DroppedEnv
	RunnerReconcile(&res, channel)
	res.LiveService, res.LiveRefused = vr.LiveService, vr.LiveRefused
	end = steptime.Start(ctx, StepArtifacts)
	res.Artifacts = a.collectArtifacts(ctx, in, t.Config.Artifacts)
	end()
	return res, nil
}

// startLive snapshots the checked, frozen sandbox and starts the verifier's
// own container from it (Docker.StartLiveVerifier); from then on in names
// that container, so everything after happens there. remove deletes it and
// the snapshot.
func (a *Activities) startLive(ctx context.Context, ins container.InspectResponse, thaw func(context.Context) error, in *VerifyInput) (remove func(), err error) {
	end := steptime.Start(ctx, StepSnapshot)
	stop := heartbeat.Every(ctx, 5*time.Second, nil) // a large layer takes a while to commit
	lv, err := a.Docker.StartLiveVerifier(ctx, ins, thaw)
	stop()
	end()
	if err != nil {
		return nil, sandboxErr(err, "start the live verifier of %s", in.Sandbox.Name)
	}
	id := in.Sandbox.ContainerID
	in.Sandbox.ContainerID, in.Sandbox.Name = lv.ID, in.Sandbox.Name+" (live verifier)"
	return func() { a.Docker.RemoveLiveVerifier(context.WithoutCancel(ctx), id) }, nil
}

// freezeForLive freezes a sandbox whose agent's processes serve sockets
// for the live verifier and returns the thaw; or, when what the agent wrote
// is too large to snapshot (sandbox.LiveVerifierMaxMB) or cannot be
// measured, thaws it, stops the agent's processes and returns nil: the
// kill-first path, with the reason in vr.LiveRefused.
func (a *Activities) freezeForLive(ctx context.Context, ins container.InspectResponse, serving int, vr *VerifyResult) (func(context.Context) error, error) {
	thaw, err := a.Docker.FreezeForVerifier(ctx, ins.ID)
	if err != nil {
		return nil, err
	}
	stop := heartbeat.Every(ctx, 5*time.Second, nil) // docker inspect --size: about 5 s a 300k files the agent wrote
	mb, err := a.Docker.WrittenMB(ctx, ins)
	stop()
	if err == nil && mb <= sandbox.LiveVerifierMaxMB {
		vr.LiveService = serving
		return thaw, nil
	}
	if err != nil {
		vr.LiveRefused = fmt.Sprintf("%d sockets served, but the size of what the agent wrote is unknown (%v): verified kill-first", serving, err)
	} else {
		vr.LiveRefused = fmt.Sprintf("%d sockets served, but the agent wrote %d MB, over the %d MB a live verifier snapshots: verified kill-first", serving, mb, sandbox.LiveVerifierMaxMB)
	}
	fmt.Fprintf(a.Docker.Log, "sandbox: %s: %s\n", ins.Name, vr.LiveRefused)
	if err := thaw(ctx); err != nil {
		return nil, err
	}
	return nil, a.killAgent(ctx, ins.ID)
}

// runSealed copies the task's tests into a fresh staging directory and runs
// ToolchainRunCmd: in one exec, the verifier's places are emptied, the tests
// moved to /tests and test.sh run sealed (cmd) as user. A run that never said it was
// ready did not start test.sh (prepareFailed): what /logs/verifier holds then is not its.
// The rest of the exec's stdout is the runner's report channel, read with
// key (the one whose share cmd hands the runner).
func (a *Activities) runSealed(ctx context.Context, in VerifyInput, t *task.Task, workDir, user string, cmd []string, timeout time.Duration, key *sandbox.ChannelKey) (sandbox.ExecResult, sandbox.RunnerChannel, error) {
	id := in.Sandbox.ContainerID
	end := steptime.Start(ctx, StepCopyTests)
	stage := sandbox.ToolchainStage()
	tests, err := task.TarBytes(t.Dir, "tests", strings.TrimPrefix(stage, "/")+"/")
	if err != nil {
		return sandbox.ExecResult{}, sandbox.RunnerChannel{}, errs.TaskInvalidf("%s/tests: %v", t.Dir, err)
	}
	stop := heartbeat.Every(ctx, 5*time.Second, nil) // into a sandbox whose disk the agent may have filled
	err = a.Docker.CopyIn(ctx, id, "/", tests)
	stop()
	end()
	if err != nil {
		return sandbox.ExecResult{}, sandbox.RunnerChannel{}, sandboxErr(err, "copy tests into %s", in.Sandbox.Name)
	}
	defer steptime.Start(ctx, StepTestSh)()
	stdout := sandbox.NewCappedBuffer(MaxChannelBytes, 0)
	er, err := a.sealedExec(ctx, id, sandbox.ToolchainRunCmd(VerifierDir, stage, workDir, user, cmd), "/", timeout, "verifying", stdout)
	if err != nil {
		return er, sandbox.RunnerChannel{}, sandboxErr(err, "run tests/test.sh in %s", in.Sandbox.Name)
	}
	ready, channel, _ := strings.Cut(stdout.String(), "\n")
	if ready != sandbox.ToolchainReady {
		return er, sandbox.RunnerChannel{}, prepareFailed(in.Sandbox.Name, workDir, er)
	}
	return er, sandbox.ParseRunnerChannelKeyed([]byte(channel), stdout.Total()-int64(len(ready))-1, key), nil
}

// channelSeen, in tests only, gets each verification's runner channel.
var channelSeen func(sandbox.RunnerChannel)

// MaxChannelBytes caps what the host keeps of the runner's report channel
// (about 220 bytes a test per phase, authenticated); a channel that
// overflowed corroborates no pass.
const MaxChannelBytes = 8 << 20

// verifiable ends the sandbox's disk watch and, if the watch stopped the
// sandbox for writing past storage_mb, starts it again: the verifier still
// runs on what the agent left. Where the kernel enforces the size, it is
// raised by the verifier's headroom (sandbox.OpenDiskForVerifier): an agent
// that filled its disk still gets verified, and its rollout says it hit
// storage_mb as a watched one does.
func (a *Activities) verifiable(ctx context.Context, id string, vr *VerifyResult) (container.InspectResponse, error) {
	if a.stopDiskWatch(id) != nil {
		vr.StorageLimit = true
	}
	full, err := a.Docker.OpenDiskForVerifier(ctx, id)
	if err != nil {
		return container.InspectResponse{}, errs.Infraf("verifier headroom: %v", err)
	}
	vr.StorageLimit = vr.StorageLimit || full
	ins, err := a.Docker.Client.ContainerInspect(ctx, id)
	if err != nil {
		return ins, err
	}
	if ins.State != nil && ins.State.Paused {
		// An attempt that froze it for a live verifier and died: nothing
		// can exec in a paused sandbox, and it starts again from the survey.
		if err := a.Docker.Client.ContainerUnpause(ctx, id); err != nil {
			return ins, err
		}
		return a.Docker.Client.ContainerInspect(ctx, id)
	}
	if ins.State != nil && !ins.State.Running && vr.StorageLimit {
		if err := a.Docker.Client.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
			return ins, err
		}
		return a.Docker.Client.ContainerInspect(ctx, id)
	}
	return ins, nil
}

// sealedExec runs a toolchain command line as root, as a raw argv: nothing
// of the container's (its bash, its timeout) starts it. stdout, when not
// nil, receives the command's standard output apart from its stderr.
func (a *Activities) sealedExec(ctx context.Context, id string, argv []string, wd string, timeout time.Duration, what string, stdout io.Writer) (sandbox.ExecResult, error) {
	return a.Docker.ExecArgv(ctx, id, argv, sandbox.ExecOptions{
		Stdout:   stdout,
		Timeout:  timeout,
		User:     "root",
		WorkDir:  wd,
		Env:      sandbox.ToolchainExecEnv,
		HeadCap:  4 << 10,
		TailCap:  4 << 10,
		Progress: func() { heartbeat.Record(ctx, what) },
	})
}

// readResults parses what test.sh left in VerifierDir. Results that can only
// have come from test.sh's own fallback (reward.txt or reward.json) while the
// pytest it runs never started are a VerifierError: a runner that was not
// found, could not be installed or had no interpreter is not the agent's 0.
func (a *Activities) readResults(ctx context.Context, in VerifyInput, t *task.Task, er sandbox.ExecResult, preview string) (VerifyResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // up to MaxResultsBytes of what the tests left
	id := in.Sandbox.ContainerID
	files, err := a.Docker.CopyOutFiles(ctx, id, VerifierDir, MaxResultFileBytes, MaxResultsBytes)
	if errors.Is(err, sandbox.ErrCopyRefused) {
		return VerifyResult{}, errs.Verifierf("read %s: %v", VerifierDir, err)
	} else if err != nil {
		return VerifyResult{}, sandboxErr(err, "read %s from %s", VerifierDir, in.Sandbox.Name)
	}
	vr, err := ParseResults(files)
	if err != nil {
		return VerifyResult{}, errs.Verifierf("tests/test.sh exited %d: %v; output tail:\n%s", er.ExitCode, err, preview)
	}
	if (vr.Format == "reward.txt" || vr.Format == "reward.json") && runsPytest(t.Dir) {
		if _, err := a.Docker.Client.ContainerStatPath(ctx, id, sandbox.ToolchainRunnerMark); err != nil {
			if !errdefs.IsNotFound(err) {
				return VerifyResult{}, sandboxErr(err, "look for the runner mark in %s", in.Sandbox.Name)
			}
			return VerifyResult{}, errs.Verifierf("the test runner never started: tests/test.sh runs pytest, but pytest did not start, and %s/%s came from test.sh's fallback (exit %d); output tail:\n%s",
				VerifierDir, vr.Format, er.ExitCode, preview)
		}
	}
	vr.ExitCode = er.ExitCode
	vr.DurationMs = er.Duration.Milliseconds()
	vr.Preview = preview
	return vr, nil
}

// runsPytest reports whether the task's tests/test.sh mentions pytest.
func runsPytest(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, task.TestScriptFile))
	return err == nil && strings.Contains(string(b), "pytest")
}

func envList(m map[string]string) []string {
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}
