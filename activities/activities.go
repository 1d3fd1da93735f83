package activities

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"
	"github.com/hashicorp/go-multierror"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// Container labels, so a reaper can find what a crash left behind.
const (
	LabelRollout  = "t1flow.rollout"
	LabelTask     = "t1flow.task"
	LabelCampaign = "t1flow.campaign"
	LabelCreated  = "t1flow.created"
	LabelWorkflow = "t1flow.workflow"
	LabelHost     = "t1flow.host"
)

// keepalive is PID 1 of every sandbox: bash ignores signals sent from inside
// the container (PID 1 is immune to SIGKILL there), reaps orphans, and lets the
// verifier stop every agent process with kill -9 -1 without stopping the sandbox.
var keepalive = []string{"bash", "-c", "trap '' TERM INT HUP; while :; do sleep 86400 & wait $!; done"}

// Capabilities tasks need: root in the sandbox can add users, change owners
// and permissions, and bind low ports, but not load modules, mount, or trace.
var sandboxCaps = []string{
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "AUDIT_WRITE", "MKNOD",
}

// Activities carries the dependencies of every t1flow activity.
type Activities struct {
	Docker    *Docker
	Store     store.Store
	Temporal  client.Client
	Host      string
	TaskCache string
	// EpisodeDir keeps model-driven episodes on the sandbox host between turns.
	EpisodeDir string

	eps     episodes
	poolsMu sync.Mutex
	pools   map[string]*inference.Pool
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
	return t, nil
}

// ContainerName is the sandbox's name: the same across retries of one
// creation, so a retry adopts the container instead of leaking a second one.
func ContainerName(rolloutID string, sandboxAttempt int) string {
	n := "t1flow-" + ids.Clean(rolloutID)
	if len(n) > 200 {
		n = n[:200]
	}
	return fmt.Sprintf("%s-s%d", n, sandboxAttempt)
}

// CreateSandbox builds the task image if needed and starts the sandbox. It
// runs on the shared sandbox queue; its result names the host queue that every
// later activity of this sandbox must use.
func (a *Activities) CreateSandbox(ctx context.Context, in CreateSandboxInput) (CreateSandboxResult, error) {
	// The base image build can run for minutes without output: heartbeat
	// on a timer so a dead worker is still noticed quickly.
	defer heartbeat.Every(ctx, 5*time.Second, nil)()
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return CreateSandboxResult{}, err
	}
	img, built, err := a.Docker.EnsureTaskImage(ctx, t, func(line string) { heartbeat.Record(ctx, "build: "+line) })
	if err != nil {
		return CreateSandboxResult{}, err
	}
	name := ContainerName(in.RolloutID, in.SandboxAttempt)
	id, err := a.Docker.StartSandbox(ctx, name, img, t, map[string]string{
		LabelRollout:  in.RolloutID,
		LabelTask:     t.ID,
		LabelCampaign: in.CampaignID,
		LabelWorkflow: in.WorkflowID,
		LabelHost:     a.Host,
	})
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
		AgentTimeoutSec:    t.Config.AgentTimeoutSec,
		VerifierTimeoutSec: t.Config.VerifierTimeoutSec,
	}, nil
}

// StartSandbox creates and starts a container, or adopts a running one of
// the same name and labels.
func (d *Docker) StartSandbox(ctx context.Context, name, img string, t *task.Task, labels map[string]string) (string, error) {
	if ins, err := d.Client.ContainerInspect(ctx, name); err == nil {
		if ins.State != nil && ins.State.Running && ins.Config.Labels[LabelRollout] == labels[LabelRollout] && ins.Config.Image == img {
			return ins.ID, nil
		}
		if err := d.Client.ContainerRemove(ctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !errdefs.IsNotFound(err) {
			return "", errs.Infraf("remove stale sandbox %s: %v", name, err)
		}
	} else if !errdefs.IsNotFound(err) {
		return "", errs.Infraf("docker inspect %s: %v", name, err)
	}
	all := map[string]string{LabelCreated: time.Now().UTC().Format(time.RFC3339)}
	for k, v := range labels {
		all[k] = v
	}
	cpus := min(t.Config.CPUs, float64(runtime.NumCPU()))
	pids := t.Config.Pids
	mem := t.Config.MemoryMB << 20
	network := "none"
	if t.Config.AllowInternet {
		network = "bridge"
	}
	resp, err := d.Client.ContainerCreate(ctx, &container.Config{
		Image:    img,
		Cmd:      keepalive,
		Labels:   all,
		Hostname: "sandbox",
	}, &container.HostConfig{
		NetworkMode: container.NetworkMode(network),
		Resources: container.Resources{
			NanoCPUs:   int64(cpus * 1e9),
			Memory:     mem,
			MemorySwap: mem, // no swap: a task over its memory limit fails visibly
			PidsLimit:  &pids,
		},
		CapDrop:     []string{"ALL"},
		CapAdd:      sandboxCaps,
		SecurityOpt: []string{"no-new-privileges"},
	}, nil, nil, name)
	if err != nil {
		if errdefs.IsConflict(err) {
			return "", errs.Infraf("sandbox %s is being created by another attempt: %v", name, err)
		}
		if errdefs.IsNotFound(err) {
			d.present.Delete(img) // removed behind our back: the retry rebuilds it
		}
		return "", errs.Infraf("docker create %s: %v", name, err)
	}
	if err := d.Client.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		d.Client.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
		return "", errs.Infraf("docker start %s: %v", name, err)
	}
	return resp.ID, nil
}

// AgentTurn runs one turn of the agent in the sandbox.
func (a *Activities) AgentTurn(ctx context.Context, in TurnInput) (TurnResult, error) {
	res := TurnResult{Turn: in.Turn}
	cmd := in.Agent.NextCommand(in.Turn)
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
			if err := a.Docker.CopyIn(ctx, in.Sandbox.ContainerID, "/", singleFileTar("solution/solve.sh", in.Agent.Solution)); err != nil {
				return res, sandboxErr(err, "copy the replacement solution into %s", in.Sandbox.Name)
			}
		}
		res.Final = true
	case AgentPolicy, AgentChat:
		return a.modelTurn(ctx, in)
	case AgentScripted:
		if in.Turn >= len(in.Agent.Commands) {
			res.Done = true
			return res, nil
		}
		res.Final = in.Turn == len(in.Agent.Commands)-1
	default:
		return res, errs.BadInputf("agent.kind %q is not a known agent", in.Agent.Kind)
	}
	res.Command = cmd
	er, err := a.Docker.Exec(ctx, in.Sandbox.ContainerID, cmd, ExecOptions{
		Timeout:  time.Duration(in.TimeoutSec * float64(time.Second)),
		Progress: func() { heartbeat.Record(ctx, fmt.Sprintf("turn %d running", in.Turn)) },
	})
	if err != nil {
		return res, sandboxErr(err, "turn %d in %s", in.Turn, in.Sandbox.Name)
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
			return res, errs.Infraf("store turn output: %v", err)
		}
		res.Output = &ref
	}
	return res, nil
}

func singleFileTar(name, content string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg})
	tw.Write([]byte(content))
	tw.Close()
	return buf.Bytes()
}

// sandboxErr classifies a Docker failure: a vanished container needs a fresh
// sandbox; anything else is retried on this one.
func sandboxErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if errors.Is(err, ErrContainerGone) || errdefs.IsNotFound(err) {
		return errs.SandboxGonef("%s: %v", what, err)
	}
	return errs.Infraf("%s: %v", what, err)
}

// CopyIn extracts a tar stream at dst inside the container.
func (d *Docker) CopyIn(ctx context.Context, id, dst string, tarball []byte) error {
	err := d.Client.CopyToContainer(ctx, id, dst, bytes.NewReader(tarball), container.CopyToContainerOptions{})
	if err != nil && (errdefs.IsNotFound(err) || errdefs.IsConflict(err)) {
		return fmt.Errorf("%w: %v", ErrContainerGone, err)
	}
	return err
}

// CopyOut reads src from the container as a tar stream.
func (d *Docker) CopyOut(ctx context.Context, id, src string) ([]byte, error) {
	rc, _, err := d.Client.CopyFromContainer(ctx, id, src)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(rc)
	return buf.Bytes(), err
}

// DestroySandbox removes the container; one already gone is success.
func (a *Activities) DestroySandbox(ctx context.Context, in DestroyInput) error {
	if err := a.Docker.Remove(ctx, in.Sandbox.ContainerID); err != nil {
		return err
	}
	if in.RolloutID != "" {
		a.forgetEpisodeOf(in.RolloutID, in.Sandbox.Name)
	}
	return nil
}

// Remove force-removes a container and its anonymous volumes.
func (d *Docker) Remove(ctx context.Context, id string) error {
	err := d.Client.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	if strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return errs.Infraf("docker rm %s: %v", id, err)
}

// Reap removes this host's t1flow containers whose rollout workflow has
// closed (or never existed), and any older than the TTL.
func (a *Activities) Reap(ctx context.Context, in ReapInput) (ReapResult, error) {
	list, err := a.Docker.Client.ContainerList(ctx, container.ListOptions{
		All: true,
		// Only this host's sandboxes: another worker sharing the daemon (or
		// talking to another Temporal) owns its own, and their workflows are
		// unknown here.
		Filters: filters.NewArgs(filters.Arg("label", LabelRollout), filters.Arg("label", LabelHost+"="+a.Host)),
	})
	if err != nil {
		return ReapResult{}, errs.Infraf("docker ps: %v", err)
	}
	var res ReapResult
	var failed *multierror.Error
	now := time.Now()
	for _, c := range list {
		reason := a.reapReason(ctx, c.Labels, now, in.TTLSec)
		if reason == "" {
			res.Kept++
			continue
		}
		// One stuck container must not shield the others.
		if err := a.Docker.Remove(ctx, c.ID); err != nil {
			failed = multierror.Append(failed, err)
			continue
		}
		name := c.ID[:12]
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		res.Removed = append(res.Removed, name+" ("+reason+")")
		heartbeat.Record(ctx, len(res.Removed))
	}
	if err := failed.ErrorOrNil(); err != nil {
		return res, errs.Infraf("reaper removed %d, failed on %d: %v", len(res.Removed), failed.Len(), err)
	}
	return res, nil
}

func (a *Activities) reapReason(ctx context.Context, labels map[string]string, now time.Time, ttl float64) string {
	if created, err := time.Parse(time.RFC3339, labels[LabelCreated]); err == nil && ttl > 0 && now.Sub(created).Seconds() > ttl {
		return "outlived TTL"
	}
	wid := labels[LabelWorkflow]
	if wid == "" || a.Temporal == nil {
		return ""
	}
	d, err := a.Temporal.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return "workflow not found"
	}
	if err != nil {
		return "" // unsure: keep it, the TTL still bounds its life
	}
	if d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return "workflow closed"
	}
	return ""
}

// StoreJSON writes a document to the artifact store for a workflow.
func (a *Activities) StoreJSON(ctx context.Context, in StoreJSONInput) (store.Ref, error) {
	ref, err := store.PutJSON(ctx, a.Store, in.Key, in.Value)
	if err != nil {
		return ref, errs.Infraf("store %s: %v", in.Key, err)
	}
	return ref, nil
}
