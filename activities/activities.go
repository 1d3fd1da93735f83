package activities

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/tfevents"
	"github.com/t1flow/t1flow/sandbox"
)

// Activities carries the dependencies of every t1flow activity.
type Activities struct {
	Docker   *sandbox.Docker
	Store    store.Store
	Temporal client.Client
	Host     string
	// Deployment names the Temporal this worker serves (address/namespace):
	// its sandboxes carry it (sandbox.LabelDeployment), and the reaper
	// leaves other deployments' sandboxes on a shared daemon alone ("":
	// unnamed, as before the label).
	Deployment string
	TaskCache  string
	// EpisodeDir keeps model-driven episodes on the sandbox host between turns.
	EpisodeDir string
	// InferenceEngine is the kind of policy inference servers rollouts call
	// (inference.EngineT1flow, EngineSGLang, EngineVLLM; empty: t1flow).
	InferenceEngine string
	// MaxSandboxes caps this host's live sandboxes (0: no cap); a creation
	// past it waits up to AdmissionWait, then fails HostFull (admission.go).
	MaxSandboxes  int
	AdmissionWait time.Duration
	// Sleep > 0 is the sleep backend (sleep.go): load tests only. Its agent
	// turns are synthetic for SleepTurns turns (0: the first ends the episode).
	Sleep      time.Duration
	SleepTurns int
	// ModelFiles is the URL of the policy's model-files sidecar
	// (gpu/hf/modelfiles.py, published by the gpu worker at
	// <home>/modelfiles.url): with it, the chat template and every
	// tokenization come from the checkpoint's own files, not the engine, and
	// so does config.json (the model facts; required with a stock engine).
	ModelFiles string

	admission admission
	// countSandboxes, in tests only, replaces Docker's count of live sandboxes.
	countSandboxes func(context.Context) (int, error)

	eps  episodes
	disk diskWatches
	// afterSend, in tests only, runs right after a turn was sent (journal.go).
	afterSend func(TurnInput) error
	poolsMu   sync.Mutex
	pools     map[string]*inference.Pool
}

// agentUser is who the agent phase runs as, as Harbor runs it: the task's
// agent.user, else the image's USER (sandbox.ImageUser); "" is root. A
// sandbox from before the image-user label (a rollout in flight across an
// upgrade) runs as its image's user, so "" is that user there; its terminal
// (terminal: a harness's tmux session) keeps running as it started, as
// the container's user, whatever agent.user says: tmux's server is per user.
func (a *Activities) agentUser(ctx context.Context, in TurnInput, terminal bool) (string, error) {
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return "", err
	}
	u, labelled, err := a.Docker.SandboxImageUser(ctx, in.Sandbox.ContainerID)
	if err != nil {
		return "", sandboxErr(err, "inspect %s", in.Sandbox.Name)
	}
	if !labelled && terminal {
		return "", nil
	}
	return cmp.Or(t.Config.AgentUser, u), nil
}

func (a *Activities) fetchTask(ctx context.Context, ref task.Ref) (*task.Task, error) {
	t, err := task.Fetch(ctx, a.Store, ref, a.TaskCache)
	if err != nil {
		var es task.Errors
		var fe *task.FieldError
		var ce *store.ChecksumError
		if errors.As(err, &es) || errors.As(err, &fe) || errors.As(err, &ce) {
			return nil, errs.TaskInvalidf("task %s (%s): %v", ref.Name, ref.ID, err)
		}
		return nil, errs.Infraf("fetch task %s: %v", ref.Name, err)
	}
	// ${VAR} in task.toml's env tables comes from this worker (Harbor's rule).
	cfg, err := t.Config.ResolveEnv(os.LookupEnv)
	if err != nil {
		return nil, errs.TaskInvalidf("task %s (%s) on host %s: %v", ref.Name, ref.ID, a.Host, err)
	}
	resolved := *t
	resolved.Config = cfg
	return &resolved, nil
}

// CreateSandbox builds the task image if needed and starts the sandbox. It
// runs on the shared sandbox queue; its result names the host queue that every
// later activity of this sandbox must use.
func (a *Activities) CreateSandbox(ctx context.Context, in CreateSandboxInput) (CreateSandboxResult, error) {
	if a.Sleep > 0 {
		return a.sleepCreate(ctx, in)
	}
	// The base image build can run for minutes without output: heartbeat
	// on a timer so a dead worker is still noticed quickly.
	defer heartbeat.Every(ctx, 5*time.Second, nil)()
	// Room on this host first (admission.go): a task image build is a
	// sandbox's load too, so it is admitted like the container it makes.
	release, err := a.admission.admit(ctx, a.MaxSandboxes, a.AdmissionWait, a.liveSandboxes)
	if err != nil {
		return CreateSandboxResult{}, err
	}
	defer release()
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return CreateSandboxResult{}, err
	}
	// Every sandbox gets the sealed verifier toolchain (built once per host).
	if _, err := a.Docker.EnsureToolchain(ctx); err != nil {
		return CreateSandboxResult{}, errs.Infraf("sealed verifier toolchain: %v", err)
	}
	img, built, err := a.Docker.EnsureTaskImage(ctx, t, func(line string) { heartbeat.Record(ctx, "build: "+line) })
	if err != nil {
		return CreateSandboxResult{}, err
	}
	name := sandbox.ContainerNameIn(a.Deployment, in.RolloutID, in.SandboxAttempt)
	labels := map[string]string{
		sandbox.LabelRollout:  in.RolloutID,
		sandbox.LabelTask:     t.ID,
		sandbox.LabelCampaign: in.CampaignID,
		sandbox.LabelWorkflow: in.WorkflowID,
		sandbox.LabelHost:     a.Host,
	}
	if a.Deployment != "" {
		labels[sandbox.LabelDeployment] = a.Deployment
	}
	id, err := a.Docker.Start(ctx, name, img, sandbox.TaskLimits(t.Config), sandbox.TaskEnv(t.Config), labels)
	if err != nil {
		return CreateSandboxResult{}, err
	}
	if ctx.Err() != nil {
		// The rollout was cancelled while the sandbox was being made: nobody
		// will destroy it, so do it now.
		a.Docker.Remove(context.WithoutCancel(ctx), id)
		return CreateSandboxResult{}, ctx.Err()
	}
	return CreateSandboxResult{
		Sandbox:            Sandbox{ContainerID: id, Name: name, Host: a.Host, HostQueue: ids.SandboxHostQueue(a.Host)},
		Image:              img,
		ImageBuilt:         built,
		AgentTimeoutSec:    t.Config.AgentDeadlineSec(),
		VerifierTimeoutSec: t.Config.VerifierTimeoutSec,
	}, nil
}

// AgentTurn runs one turn of the agent in the sandbox. With in.StoreTurn
// the whole result goes to the store and the workflow gets a slim one
// (storeTurn).
func (a *Activities) AgentTurn(ctx context.Context, in TurnInput) (TurnResult, error) {
	res, err := a.anyTurn(ctx, in)
	if err != nil || !in.StoreTurn || res.Done {
		return res, err
	}
	return a.storeTurn(ctx, in, res)
}

func (a *Activities) anyTurn(ctx context.Context, in TurnInput) (TurnResult, error) {
	if a.Sleep > 0 {
		return a.sleepTurn(ctx, in)
	}
	res := TurnResult{Turn: in.Turn}
	if stop, err := a.storageStop(ctx, in.Sandbox.ContainerID, &res); stop || err != nil {
		return res, err
	}
	res, err := a.agentTurn(ctx, in)
	if a.diskExceeded(in.Sandbox.ContainerID) != nil {
		// Stopped mid-turn for writing past storage_mb: the agent phase ends
		// here, and verification still runs.
		res.Turn, res.EndReason, res.Final = in.Turn, EndStorageLimit, true
		return res, nil
	}
	return res, err
}

// storageStop starts the sandbox's disk watch if it needs one, and ends the
// agent phase if the watch has already stopped the sandbox.
func (a *Activities) storageStop(ctx context.Context, id string, res *TurnResult) (bool, error) {
	if err := a.watchDisk(ctx, id); err != nil {
		return false, sandboxErr(err, "inspect sandbox %s", id)
	}
	if a.diskExceeded(id) != nil {
		res.Done, res.EndReason = true, EndStorageLimit
		return true, nil
	}
	return false, nil
}

func (a *Activities) agentTurn(ctx context.Context, in TurnInput) (TurnResult, error) {
	res := TurnResult{Turn: in.Turn}
	cmd := in.Agent.NextCommand(in.Turn)
	var env []string
	var user string // agentUser's
	switch in.Agent.Kind {
	case AgentNop:
		res.Done = true
		return res, nil
	case AgentOracle:
		if in.Turn > 0 {
			res.Done = true
			return res, nil
		}
		t, err := a.fetchTask(ctx, in.Task)
		if err != nil {
			return res, err
		}
		b, err := task.TarBytes(t.Dir, "solution", "solution/")
		if err != nil {
			return res, errs.TaskInvalidf("%s: %v", filepath.Join(t.Dir, "solution"), err)
		}
		if err := a.Docker.CopyIn(ctx, in.Sandbox.ContainerID, "/", b); err != nil {
			return res, sandboxErr(err, "copy solution into %s", in.Sandbox.Name)
		}
		if in.Agent.Solution != "" {
			if err := a.Docker.CopyIn(ctx, in.Sandbox.ContainerID, "/", sandbox.SingleFileTar("solution/solve.sh", in.Agent.Solution)); err != nil {
				return res, sandboxErr(err, "copy the replacement solution into %s", in.Sandbox.Name)
			}
		}
		res.Final = true
		env = solutionEnv(t.Config.SolutionEnv)
		if user, err = a.agentUser(ctx, in, false); err != nil {
			return res, err
		}
	case AgentPolicy, AgentChat:
		return a.modelTurn(ctx, in)
	case AgentScripted:
		if in.Turn >= len(in.Agent.Commands) {
			res.Done = true
			return res, nil
		}
		var err error
		if user, err = a.agentUser(ctx, in, false); err != nil {
			return res, err
		}
		res.Final = in.Turn == len(in.Agent.Commands)-1
	default:
		return res, errs.BadInputf("agent.kind %q is not a known agent", in.Agent.Kind)
	}
	res.Command = cmd
	return a.runCommand(ctx, in, res, env, user)
}

// runCommand runs a scripted or oracle turn's command exactly once: the turn
// journal is written before the command starts, and its result after it ends;
// a retry returns that result, or reports the turn lost.
func (a *Activities) runCommand(ctx context.Context, in TurnInput, res TurnResult, env []string, user string) (TurnResult, error) {
	if e, err := a.readJournal(in); err != nil || e != nil {
		if err == nil && e.State == journalDone && e.Result != nil {
			return *e.Result, nil
		}
		if err == nil {
			err = lostTurn(in, e)
		}
		return res, err
	}
	er, err := a.Docker.Exec(ctx, in.Sandbox.ContainerID, res.Command, sandbox.ExecOptions{
		Timeout:  time.Duration(in.TimeoutSec * float64(time.Second)),
		Env:      env,
		User:     user,
		Progress: func() { heartbeat.Record(ctx, fmt.Sprintf("turn %d running", in.Turn)) },
		Starting: a.journalStart(in, res.Command),
	})
	if err != nil {
		return res, sandboxErr(err, "turn %d in %s", in.Turn, in.Sandbox.Name)
	}
	if err := a.sent(in); err != nil {
		return res, err
	}
	res.ExitCode = er.ExitCode
	res.DurationMs = er.Duration.Milliseconds()
	res.TimedOut = er.TimedOut
	res.OutputBytes = er.Bytes
	res.DroppedBytes = er.Dropped
	res.Preview = er.Output
	if len(er.Output) > PreviewBytes {
		res.Preview = er.Output[:PreviewBytes/2] + "\n[...]\n" + er.Output[len(er.Output)-PreviewBytes/2:]
		ref, err := a.Store.Put(ctx, fmt.Sprintf("rollouts/%s/turn-%04d.txt", ids.Clean(in.RolloutID), in.Turn), strings.NewReader(er.Output))
		if err != nil {
			// The command ran: its result is recorded without the full
			// output rather than lost with it.
			res.Preview += fmt.Sprintf("\n[full output not stored: %v]", err)
		} else {
			res.Output = &ref
		}
	}
	if err := a.writeJournal(in, journalEntry{State: journalDone, Command: res.Command, Result: &res}); err != nil {
		return res, err
	}
	return res, nil
}

// solutionEnv is task.toml's solution.env for the oracle's solve.sh.
func solutionEnv(m map[string]string) []string {
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// sandboxErr classifies a Docker failure: a vanished container needs a fresh
// sandbox; anything else is retried on this one.
func sandboxErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if sandbox.IsGone(err) {
		return errs.SandboxGonef("%s: %v", what, err)
	}
	return errs.Infraf("%s: %v", what, err)
}

// DestroySandbox removes the container; one already gone is success.
func (a *Activities) DestroySandbox(ctx context.Context, in DestroyInput) error {
	defer heartbeat.Every(ctx, 3*time.Second, nil)() // its 15 s heartbeat timeout (workflows' release)
	if a.Sleep > 0 {
		return nil
	}
	if err := a.Docker.Remove(ctx, in.Sandbox.ContainerID); err != nil {
		return err
	}
	a.forgetDisk(in.Sandbox.ContainerID)
	if in.RolloutID != "" {
		a.forgetEpisodeOf(in.RolloutID, in.Sandbox.Name)
	}
	return nil
}

// StoreJSON writes a document to the artifact store for a workflow.
func (a *Activities) StoreJSON(ctx context.Context, in StoreJSONInput) (store.Ref, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	ref, err := store.PutJSON(ctx, a.Store, in.Key, in.Value)
	if err != nil {
		return ref, errs.Infraf("store %s: %v", in.Key, err)
	}
	return ref, nil
}

// StoreEvents writes a TensorBoard event file to the artifact store for a workflow.
func (a *Activities) StoreEvents(ctx context.Context, in StoreEventsInput) (store.Ref, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)() // the control queue's heartbeat timeout (workflows.ControlHeartbeat)
	ref, err := a.Store.Put(ctx, in.Key, bytes.NewReader(tfevents.File(in.WallTime, in.Steps)))
	if err != nil {
		return ref, errs.Infraf("store %s: %v", in.Key, err)
	}
	return ref, nil
}
