package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
)

// A task's environment.storage_mb bounds what its sandbox may write. Docker
// enforces it itself (`--storage-opt size=`) only with overlay2 on xfs
// mounted with pquota, or the btrfs driver with quota groups
// (scripts/ensure-xfs-docker.sh makes such a daemon); elsewhere (overlay2 on ext4, as on this machine)
// DiskWatch polls the container's writable layer and kills the sandbox once
// it is over, so the host loses at most the limit plus what the agent writes
// between two polls. See docs/verification.md.

// DiskPlan is how storage_mb is enforced on this daemon.
type DiskPlan struct {
	// StorageOpt goes into HostConfig.StorageOpt at create time when the
	// daemon enforces sizes; nil otherwise.
	StorageOpt map[string]string
	// Watch is true when the limit must be enforced by DiskWatch instead.
	Watch bool
	// Referenced is true when the daemon's size counts the image's files as
	// well as what the sandbox writes (full btrfs quota groups limit a
	// subvolume's referenced bytes, and a container's subvolume is a
	// snapshot of its image): the size given is then the image's plus
	// storage_mb, so the sandbox may still write storage_mb. Simple quotas
	// (squota) count only what the sandbox writes: false.
	Referenced bool
	// Why says what the daemon supports, for logs and the operator.
	Why string
}

var (
	diskProbeMu sync.Mutex
	diskProbed  = map[*client.Client]DiskPlan{}
)

// DiskLimit says how to enforce storageMB for sandboxes of img on this
// daemon. The first call per client probes the daemon by creating (never
// starting) a container with a size option: the daemon's answer is the only
// reliable test of pquota support.
func DiskLimit(ctx context.Context, cli *client.Client, img string, storageMB int64) (DiskPlan, error) {
	diskProbeMu.Lock()
	plan, ok := diskProbed[cli]
	diskProbeMu.Unlock()
	if !ok {
		var err error
		plan, err = diskProbe(ctx, cli, img)
		if err != nil {
			return DiskPlan{}, err
		}
		diskProbeMu.Lock()
		diskProbed[cli] = plan
		diskProbeMu.Unlock()
	}
	if plan.Watch {
		return plan, nil
	}
	size := storageMB
	if plan.Referenced {
		mb, err := imageMB(ctx, cli, img)
		if err != nil {
			return DiskPlan{}, err
		}
		size += mb
	}
	plan.StorageOpt = map[string]string{"size": fmt.Sprintf("%dM", size)}
	return plan, nil
}

// imageMB is the image's size in MB, rounded up.
func imageMB(ctx context.Context, cli *client.Client, img string) (int64, error) {
	ins, _, err := cli.ImageInspectWithRaw(ctx, img)
	if err != nil {
		return 0, fmt.Errorf("image %s: %w", img, err)
	}
	return (ins.Size + 1<<20 - 1) >> 20, nil
}

func diskProbe(ctx context.Context, cli *client.Client, img string) (DiskPlan, error) {
	info, err := cli.Info(ctx)
	if err != nil {
		return DiskPlan{}, err
	}
	backing := ""
	for _, kv := range info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	what := fmt.Sprintf("storage driver %s on %s", info.Driver, backing)
	if info.Driver == "btrfs" {
		// btrfs simple quotas (squota) count only the extents the sandbox
		// writes, so a 1 MB size fits a fresh container; full quota groups
		// count its image's shared files too (Referenced), and refuse it.
		err := probeSize(ctx, cli, img, 1)
		if err == nil {
			return DiskPlan{Why: what + ": the daemon enforces storage_mb (--storage-opt size; btrfs simple quotas count what the sandbox writes)"}, nil
		}
		if errdefs.IsNotFound(err) {
			return DiskPlan{}, fmt.Errorf("probe disk limits: %w", err)
		}
	}
	referenced, probe := info.Driver == "btrfs", int64(64)
	if referenced {
		mb, err := imageMB(ctx, cli, img)
		if err != nil {
			return DiskPlan{}, fmt.Errorf("probe disk limits: %w", err)
		}
		probe += mb
	}
	err = probeSize(ctx, cli, img, probe)
	if err == nil {
		return DiskPlan{Referenced: referenced, Why: what + ": the daemon enforces storage_mb (--storage-opt size)"}, nil
	}
	if errdefs.IsNotFound(err) {
		return DiskPlan{}, fmt.Errorf("probe disk limits: %w", err)
	}
	return DiskPlan{Watch: true, Why: what + ": the daemon cannot enforce sizes (" + strings.TrimSpace(err.Error()) +
		"); storage_mb is enforced by polling the writable layer"}, nil
}

// DiskUsage is the size of the sandbox's writable layer in bytes.
func DiskUsage(ctx context.Context, cli *client.Client, id string) (int64, error) {
	ins, _, err := cli.ContainerInspectWithRaw(ctx, id, true)
	if err != nil {
		return 0, err
	}
	if ins.SizeRw == nil {
		return 0, fmt.Errorf("docker inspect --size of %s gave no SizeRw", id)
	}
	return *ins.SizeRw, nil
}

// DiskExceeded says a sandbox went over its storage limit.
type DiskExceeded struct {
	Used, Limit int64
}

func (e DiskExceeded) Error() string {
	return fmt.Sprintf("the sandbox wrote %d MB, more than environment.storage_mb = %d", e.Used>>20, e.Limit>>20)
}

// DiskWatch polls the sandbox's writable layer every interval until ctx ends
// and, the first time it is over limitMB, kills the container and returns
// DiskExceeded (nil when ctx ends first). Run it beside the agent phase when
// DiskLimit says Watch; the rollout is then an agent failure with that cause,
// and the sandbox is removed as usual. A poll costs one `docker inspect
// --size` (0.1-0.3 s for 20,000 files and 500 MB on this machine), which
// walks the layer: keep interval at a few seconds.
func DiskWatch(ctx context.Context, cli *client.Client, id string, limitMB int64, interval time.Duration) error {
	limit := limitMB << 20
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		used, err := DiskUsage(ctx, cli, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errdefs.IsNotFound(err) {
				return nil // removed: nothing left to bound
			}
			continue // a transient daemon error: try again next tick
		}
		if used > limit {
			cli.ContainerKill(context.WithoutCancel(ctx), id, "KILL")
			return DiskExceeded{Used: used, Limit: limit}
		}
	}
}

// probeSize creates (never starts) a container of img with a size of mb MB,
// removes it, and returns the daemon's answer.
func probeSize(ctx context.Context, cli *client.Client, img string, mb int64) error {
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"true"}},
		&container.HostConfig{NetworkMode: "none", StorageOpt: map[string]string{"size": fmt.Sprintf("%dM", mb)}}, nil, nil, "")
	if err == nil {
		cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
	}
	return err
}
