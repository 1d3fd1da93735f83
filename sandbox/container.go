package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/errdefs"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
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
	// LabelDeployment is the Temporal deployment (address/namespace) whose
	// workflow owns the sandbox: two deployments may share a Docker daemon
	// and a host name, and neither adopts nor reaps the other's sandboxes.
	LabelDeployment = "t1flow.deployment"
	// LabelDiskWatch holds storage_mb when the daemon cannot enforce it and
	// the sandbox host polls the writable layer instead (DiskWatch).
	LabelDiskWatch = "t1flow.disk-watch-mb"
	// LabelImageUser is the image's USER ("" for root). The sandbox itself
	// runs as root whatever the image says: Docker gives an exec the
	// capabilities of the container's user, so in a container of a non-root
	// USER even `exec -u root` has none (the verifier could not kill the
	// agent's processes or take on verifier.user). Who the agent and the
	// verifier run as is then named on each exec (ImageUser).
	LabelImageUser = "t1flow.image-user"
)

// ImageUser is the USER of a sandbox's image ("" for root), as Harbor's
// phases default to it, from LabelImageUser. ok is false for a sandbox
// started before the label (a rollout in flight across an upgrade): it runs
// as its image's user, its root execs may lack capabilities and its
// toolchain may lack setpriv, so callers keep the old behaviour for it (the
// agent as agent.user, else the container's user; the verifier as root).
func ImageUser(ins container.InspectResponse) (user string, ok bool) {
	if ins.Config == nil {
		return "", false
	}
	user, ok = ins.Config.Labels[LabelImageUser]
	return user, ok
}

// SandboxImageUser is ImageUser of the sandbox id.
func (d *Docker) SandboxImageUser(ctx context.Context, id string) (string, bool, error) {
	ins, err := d.Client.ContainerInspect(ctx, id)
	if err != nil {
		return "", false, err
	}
	u, ok := ImageUser(ins)
	return u, ok, nil
}

// keepaliveScript is PID 1's loop: bash ignores signals sent from inside the
// container (PID 1 is immune to SIGKILL there), reaps orphans (its SIGCHLD
// handler), and lets the verifier stop every agent process with kill -9 -1
// without stopping the sandbox. Once started it runs nothing, neither the
// container's commands nor any other: it blocks in the read builtin on a pipe
// it holds both ends of (the process substitution's `:` is a fork of itself
// that exits at once), on which nothing ever arrives, so it never forks or
// execs again.
// A loop that ran `sleep` after every kill ran the container's sleep, which
// root in the sandbox can replace: PID 1 then started the agent's program
// again, as root, after the verifier's last kill -9 -1, while test.sh ran.
const keepaliveScript = "trap '' TERM INT HUP; exec 3<> <(:); while :; do read -r -n 1 -u 3; done"

// keepaliveUID is PID 1's real UID when it runs from the toolchain (keepalive).
const keepaliveUID = "65534"

// keepalive is PID 1 of a sandbox (Docker.Start) and of a live verifier. Its
// Entrypoint is always cleared: an image's ENTRYPOINT (the live verifier's
// is the agent's snapshot's) would be PID 1, or run it, from the container's
// files.
//
// With the sealed verifier toolchain mounted (toolchain true: every sandbox
// the sealed verifier can verify, every live verifier) it is the toolchain's
// bash, started through the toolchain's env and setpriv with nothing
// inherited, so not one file of the container's is executed even at start.
// setpriv gives it a real UID other than its effective one (root, kept by
// bash -p): the kernel makes such a process non-dumpable, and no process can
// match all of its UIDs, so nothing in the container (which never has
// CAP_SYS_PTRACE) can ptrace PID 1, open its /proc/1/mem to rewrite its code
// or its loop, or open its descriptors through /proc/1/fd.
//
// Without the toolchain (a Docker that never ran EnsureToolchain: its
// sandboxes cannot be verified, ErrToolchainMissing) it is the image's bash,
// executed once at start and running the same loop.
func keepalive(toolchain bool) []string {
	if !toolchain {
		return []string{"bash", "-c", keepaliveScript, "t1flow-keepalive"}
	}
	m := ToolchainMount
	return []string{m + "/bin/env", "-i", "PATH=" + m + "/bin",
		m + "/bin/setpriv", "--ruid=" + keepaliveUID, "--",
		m + "/bin/bash", "--norc", "--noprofile", "-p", "-c", keepaliveScript, "t1flow-keepalive"}
}

// mountsToolchain says whether mounts bring the toolchain in (sealAndBound).
func mountsToolchain(mounts []mount.Mount) bool {
	for _, m := range mounts {
		if m.Target == ToolchainMount && m.ReadOnly {
			return true
		}
	}
	return false
}

// Capabilities tasks need: root in the sandbox can add users, change owners
// and permissions, and bind low ports, but not load modules, mount, or trace.
var sandboxCaps = []string{
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "AUDIT_WRITE", "MKNOD",
}

// Limits bound what one sandbox may use.
type Limits struct {
	CPUs     float64 // capped at this host's CPU count
	MemoryMB int64   // also the memory+swap limit: no swap
	Pids     int64
	Internet bool // a bridge network; otherwise none at all
	// StorageMB bounds the writable layer (0: unbounded): a daemon size
	// limit where it can enforce one, else DiskWatch (docs/verification.md).
	StorageMB int64
	// WorkDir (environment.workdir) replaces the image's WORKDIR; "" keeps it.
	WorkDir string
	// VerifierPython (task.Config.VerifierPython) picks the sealed verifier
	// toolchain whose Python serves test.sh's uv request; "" follows the
	// image's base (SandboxToolchain).
	VerifierPython string
}

// TaskLimits are the limits a task's task.toml asks for.
func TaskLimits(c task.Config) Limits {
	return Limits{CPUs: c.CPUs, MemoryMB: c.MemoryMB, Pids: c.Pids, Internet: c.AllowInternet, StorageMB: c.StorageMB, WorkDir: c.Workdir, VerifierPython: c.VerifierPython}
}

// ContainerName is the sandbox's name: the same across retries of one
// creation, so a retry adopts the container instead of leaking a second one.
func ContainerName(rolloutID string, sandboxAttempt int) string {
	return ContainerNameIn("", rolloutID, sandboxAttempt)
}

// ContainerNameIn is ContainerName within a deployment (LabelDeployment):
// the same rollout ID of two deployments on one daemon (a campaign name
// reused against another Temporal) names two containers.
func ContainerNameIn(deployment, rolloutID string, sandboxAttempt int) string {
	n := "t1flow-"
	if deployment != "" {
		sum := sha256.Sum256([]byte(deployment))
		n += hex.EncodeToString(sum[:4]) + "-"
	}
	n += ids.Clean(rolloutID)
	if len(n) > 200 {
		n = n[:200]
	}
	return fmt.Sprintf("%s-s%d", n, sandboxAttempt)
}

// OtherDeployment says a sandbox's labels name a deployment, and another
// than deployment (neither "": sandboxes made before the label, and callers
// that name none, are everyone's).
func OtherDeployment(labels map[string]string, deployment string) bool {
	d := labels[LabelDeployment]
	return d != "" && deployment != "" && d != deployment
}

// TaskEnv is the task's [environment.env] as KEY=VALUE, set in the sandbox
// for every phase (the sealed verifier filters it like the image's ENV).
func TaskEnv(c task.Config) []string {
	env := make([]string, 0, len(c.Env))
	for k, v := range c.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// Start creates and starts a container, or adopts a running one of the same
// name, rollout label and image. env adds to the image's environment.
func (d *Docker) Start(ctx context.Context, name, img string, lim Limits, env []string, labels map[string]string) (string, error) {
	if ins, err := d.Client.ContainerInspect(ctx, name); err == nil {
		if ins.Config.Labels[LabelDeployment] != labels[LabelDeployment] {
			// Not this deployment's to adopt or to remove.
			return "", errs.Infraf("sandbox name %s is taken by a container of deployment %q (this is %q)", name, ins.Config.Labels[LabelDeployment], labels[LabelDeployment])
		}
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
	ii, err := d.Client.ImageInspect(ctx, img)
	if err != nil {
		if errdefs.IsNotFound(err) {
			d.present.Delete(img) // removed behind our back: the retry rebuilds it
		}
		return "", errs.Infraf("docker image inspect %s: %v", img, err)
	}
	all[LabelImageUser] = "" // set even for an image without a config: root
	if ii.Config != nil {
		all[LabelImageUser] = ii.Config.User
	}
	hc := hostConfig(lim)
	if err := d.sealAndBound(ctx, img, lim, hc, all); err != nil {
		return "", err
	}
	resp, err := d.Client.ContainerCreate(ctx, &container.Config{
		Image:      img,
		User:       "0", // LabelImageUser says why
		Env:        env,
		Entrypoint: []string{}, // keepalive says why
		Cmd:        keepalive(mountsToolchain(hc.Mounts)),
		Labels:     all,
		Hostname:   "sandbox",
		WorkingDir: lim.WorkDir,
	}, hc, nil, nil, name)
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

// sealAndBound adds the sealed verifier toolchain's read-only mount (when
// EnsureToolchain has run) and the storage limit: a daemon-enforced size, or
// a label that tells the sandbox host to watch the writable layer.
func (d *Docker) sealAndBound(ctx context.Context, img string, lim Limits, hc *container.HostConfig, labels map[string]string) error {
	tc, err := d.SandboxToolchain(ctx, img, lim.VerifierPython)
	if err != nil {
		return errs.Infraf("sealed verifier toolchain for %s: %v", img, err)
	}
	if tc != nil {
		hc.Mounts = append(hc.Mounts, tc.Mount())
	}
	if lim.StorageMB <= 0 {
		return nil
	}
	plan, err := DiskLimit(ctx, d.Client, img, lim.StorageMB)
	if err != nil {
		return errs.Infraf("storage limit for %s: %v", img, err)
	}
	if !d.diskSaid.Swap(true) {
		d.sayDiskPlan(plan)
	}
	if plan.StorageOpt != nil {
		hc.StorageOpt = plan.StorageOpt
	}
	if plan.Watch {
		labels[LabelDiskWatch] = fmt.Sprint(lim.StorageMB)
	}
	return nil
}

// hostConfig confines a sandbox: its limits, no network unless allowed, only
// the capabilities tasks need, and no process reaching into another
// (SecurityOpt).
func hostConfig(lim Limits) *container.HostConfig {
	cpus := min(lim.CPUs, float64(runtime.NumCPU()))
	pids := lim.Pids
	mem := lim.MemoryMB << 20
	network := "none"
	if lim.Internet {
		network = "bridge"
	}
	return &container.HostConfig{
		NetworkMode: container.NetworkMode(network),
		Resources: container.Resources{
			NanoCPUs:   int64(cpus * 1e9),
			Memory:     mem,
			MemorySwap: mem, // no swap: a task over its memory limit fails visibly
			PidsLimit:  &pids,
		},
		CapDrop:     []string{"ALL"},
		CapAdd:      sandboxCaps,
		SecurityOpt: SecurityOpt(),
	}
}

// Remove force-removes a container and its anonymous volumes, and a
// sandbox's live verifier (RemoveLiveVerifier); one already gone (or going)
// is success.
func (d *Docker) Remove(ctx context.Context, id string) error {
	// A live verifier that a crash left behind goes with its sandbox.
	if err := d.RemoveLiveVerifier(ctx, id); err != nil {
		return errs.Infraf("remove the live verifier of %s: %v", id, err)
	}
	err := d.Client.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || errdefs.IsNotFound(err) {
		return nil
	}
	if strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return errs.Infraf("docker rm %s: %v", id, err)
}

// Container is one t1flow sandbox as the reaper sees it.
type Container struct {
	ID     string
	Name   string // without the leading slash; the short ID if it has none
	Labels map[string]string
}

// List returns host's sandboxes, running or not. Only this host's: another
// worker sharing the daemon (or talking to another Temporal) owns its own,
// and their workflows are unknown here.
func (d *Docker) List(ctx context.Context, host string) ([]Container, error) {
	return d.list(ctx, filters.NewArgs(filters.Arg("label", LabelRollout), filters.Arg("label", LabelHost+"="+host)))
}

// ListOthers returns the sandboxes on this daemon that other hosts than
// host made (sandbox workers sharing one daemon), running or not.
func (d *Docker) ListOthers(ctx context.Context, host string) ([]Container, error) {
	all, err := d.list(ctx, filters.NewArgs(filters.Arg("label", LabelRollout), filters.Arg("label", LabelHost)))
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, c := range all {
		if c.Labels[LabelHost] != host {
			out = append(out, c)
		}
	}
	return out, nil
}

func (d *Docker) list(ctx context.Context, f filters.Args) ([]Container, error) {
	list, err := d.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	out := make([]Container, 0, len(list))
	for _, c := range list {
		name := c.ID[:12]
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, Container{ID: c.ID, Name: name, Labels: c.Labels})
	}
	return out, nil
}
