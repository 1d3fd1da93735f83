package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/errdefs"
)

// A sandbox whose agent left a service running (ToolchainSurveyCmd found a
// socket served) is verified live, the way Harbor runs a task's tests beside
// what solve.sh started, without letting anything of the agent's reach the
// verdict (docs/verification.md, "A service the solution started"):
//
//  1. FreezeForVerifier pauses the sandbox (the cgroup freezer: every process
//     at once, none can fork or signal its way out);
//  2. the tamper check reads the frozen filesystem;
//  3. StartLiveVerifier commits the frozen sandbox into a snapshot image,
//     thaws the sandbox (the service serves again), and starts the verifier's
//     own container from the snapshot: the sandbox's network namespace (its
//     localhost is the service's), but its own pid, mount and IPC
//     namespaces, so no agent process can see, signal, trace or write into
//     the verifier's processes or files; the same limits, capabilities,
//     security options (SecurityOpt) and read-only toolchain as the
//     sandbox;
//  4. the sealed verifier (ToolchainRunCmd) runs there as it would in the
//     sandbox, and RemoveLiveVerifier (also called by Remove) deletes the
//     container and the snapshot.

// LiveVerifierMaxMB bounds the writable layer a live verifier snapshots:
// docker commit copies it (about 10 s and the layer's size again on disk per
// GB here, outside the sandbox's storage_mb), so an agent that filled a large
// storage_mb and left a listener could otherwise slow the host and fill its
// disk. A sandbox that wrote more is verified kill-first: its service is
// stopped, as before the live verifier.
var LiveVerifierMaxMB int64 = 2048

// LabelVerifierOf marks a live verifier's container with the sandbox it
// verifies; it goes when its sandbox goes (Remove), if not before.
const LabelVerifierOf = "t1flow.verifier-of"

// LiveVerifierName is the live verifier container of sandbox id (a full
// container ID): fixed, so a retried verification replaces its leftover and
// Remove finds it.
func LiveVerifierName(id string) string { return "t1flow-verify-" + id }

// liveSnapshotRef is the snapshot image StartLiveVerifier commits for sandbox id.
func liveSnapshotRef(id string) string { return "t1flow-verify:" + id }

// FreezeForVerifier pauses the sandbox (a paused one stays paused) and
// returns the thaw. Thaw does its work once (it is not safe for concurrent
// use); StartLiveVerifier thaws on its own once the snapshot is taken.
func (d *Docker) FreezeForVerifier(ctx context.Context, id string) (thaw func(context.Context) error, err error) {
	ins, err := d.Client.ContainerInspect(ctx, id)
	if err != nil {
		return nil, err
	}
	if ins.State == nil || !ins.State.Paused {
		if err := d.pause(ctx, id); err != nil {
			return nil, fmt.Errorf("docker pause %s: %w", id, err)
		}
	}
	thawed := false
	return func(ctx context.Context) error {
		if thawed {
			return nil
		}
		err := d.Client.ContainerUnpause(ctx, id)
		if err != nil && errdefs.IsNotFound(err) {
			err = nil // gone
		}
		thawed = err == nil
		return err
	}, nil
}

// freezeTries is how many times pause tries a freeze the runtime gave up on.
const freezeTries = 5

// pause pauses container id. The runtime's cgroup freeze can give up
// ("unable to freeze") when the container's processes fork or the machine is
// loaded while it waits; the runtime thaws what it froze, so pause tries
// again, a little later each time. Other errors (gone, not running) end it.
func (d *Docker) pause(ctx context.Context, id string) error {
	var err error
	for try := 1; ; try++ {
		if err = d.Client.ContainerPause(ctx, id); err == nil || !strings.Contains(err.Error(), "unable to freeze") || try == freezeTries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
	}
}

// LiveVerifier is a running live verifier container.
type LiveVerifier struct {
	ID string
}

// StartLiveVerifier snapshots the frozen sandbox ins (FreezeForVerifier,
// tamper check done), thaws it, and starts the verifier's container from the
// snapshot. The sandbox's toolchain mount, resources (CPUs, memory, pids)
// and capabilities are the verifier's too, and so are a sandbox's security
// options (SecurityOpt); its writable layer gets VerifierHeadroomMB
// where the daemon enforces sizes. On error nothing is left but the sandbox
// (thawed).
func (d *Docker) StartLiveVerifier(ctx context.Context, ins container.InspectResponse, thaw func(context.Context) error) (lv LiveVerifier, err error) {
	id := ins.ID
	defer func() {
		if terr := thaw(context.WithoutCancel(ctx)); terr != nil && err == nil {
			err = fmt.Errorf("docker unpause %s: %w", id, terr)
		}
		if err != nil {
			d.RemoveLiveVerifier(context.WithoutCancel(ctx), id)
		}
	}()
	if err := d.RemoveLiveVerifier(ctx, id); err != nil { // a retry's leftovers
		return lv, err
	}
	var tc *mount.Mount
	for _, m := range ins.Mounts {
		if m.Destination == ToolchainMount && !m.RW {
			tc = &mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: ToolchainMount, ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true}}
		}
	}
	if tc == nil {
		return lv, ErrToolchainMissing
	}
	// The snapshot carries the sandbox's labels and so does the container
	// made from it (Docker merges them): the host counts it among its
	// sandboxes while it runs, and the reaper removes a leftover with its
	// rollout's sandbox.
	labels := map[string]string{LabelVerifierOf: id}
	snap, err := d.Client.ContainerCommit(ctx, id, container.CommitOptions{
		Reference: liveSnapshotRef(id),
		Comment:   "t1flow: the sandbox as its agent left it, for the live verifier",
		Pause:     true, // it is paused already; never commit a running one
	})
	if err != nil {
		return lv, fmt.Errorf("docker commit %s: %w", id, err)
	}
	if err := thaw(ctx); err != nil {
		return lv, fmt.Errorf("docker unpause %s: %w", id, err)
	}
	hc := &container.HostConfig{
		// The sandbox's network namespace, nothing else of it: localhost is
		// the service's, processes and files are the verifier's own.
		NetworkMode: container.NetworkMode("container:" + id),
		IpcMode:     container.IpcMode("private"),
		Resources: container.Resources{
			NanoCPUs:   ins.HostConfig.NanoCPUs,
			Memory:     ins.HostConfig.Memory,
			MemorySwap: ins.HostConfig.MemorySwap,
			PidsLimit:  ins.HostConfig.PidsLimit,
		},
		CapDrop:     ins.HostConfig.CapDrop,
		CapAdd:      ins.HostConfig.CapAdd,
		SecurityOpt: SecurityOpt(), // not ins's: a sandbox older than its seccomp profile has none
		Mounts:      []mount.Mount{*tc},
	}
	if ins.HostConfig.StorageOpt["size"] != "" {
		plan, err := DiskLimit(ctx, d.Client, snap.ID, VerifierHeadroomMB)
		if err != nil {
			return lv, fmt.Errorf("storage limit of the live verifier of %s: %w", id, err)
		}
		hc.StorageOpt = plan.StorageOpt
	}
	resp, err := d.Client.ContainerCreate(ctx, &container.Config{
		Image:      snap.ID,
		User:       "0", // as the sandbox (LabelImageUser)
		Entrypoint: []string{},
		// The toolchain's (tc is mounted), never the snapshot's bash, sleep
		// or ENTRYPOINT: the agent's files (keepalive).
		Cmd:        keepalive(true),
		Labels:     labels,
		WorkingDir: ins.Config.WorkingDir,
	}, hc, nil, nil, LiveVerifierName(id))
	if err != nil {
		return lv, fmt.Errorf("docker create %s: %w", LiveVerifierName(id), err)
	}
	lv.ID = resp.ID
	if err := d.Client.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return lv, fmt.Errorf("docker start %s: %w", LiveVerifierName(id), err)
	}
	return lv, nil
}

// RemoveLiveVerifier removes sandbox id's live verifier container and
// snapshot image, if any.
func (d *Docker) RemoveLiveVerifier(ctx context.Context, id string) error {
	var all error
	err := d.Client.ContainerRemove(ctx, LiveVerifierName(id), container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !errdefs.IsNotFound(err) && !strings.Contains(err.Error(), "already in progress") {
		all = errors.Join(all, fmt.Errorf("docker rm %s: %w", LiveVerifierName(id), err))
	}
	_, err = d.Client.ImageRemove(ctx, liveSnapshotRef(id), image.RemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !errdefs.IsNotFound(err) {
		all = errors.Join(all, fmt.Errorf("docker rmi %s: %w", liveSnapshotRef(id), err))
	}
	return all
}
