package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
)

// VerifierHeadroomMB is what the sealed verifier may write in a sandbox whose
// size the kernel enforces, on top of what the agent left: its staged tests,
// /logs/verifier, the runner's caches. Without it an agent that fills its
// storage_mb makes the verifier fail to stage its tests (docker cp: "disk
// quota exceeded"), which would read as an infrastructure error rather than
// the agent's failure. The agent's processes are all dead by then, so the
// headroom is the verifier's (and the in-process test code's, bounded too).
var VerifierHeadroomMB int64 = 512

// OpenDiskForVerifier raises a kernel-limited sandbox's size by
// VerifierHeadroomMB before verification, and says whether the agent had
// filled it (its quota group at the limit). A sandbox without a daemon size
// (unlimited, or watched: the watch is stopped before verification) needs
// nothing. Only the btrfs driver's quota group is raised, from this host: the
// daemon must be local (the quota daemon of scripts/ensure-xfs-docker.sh is);
// overlay2 on XFS project quotas is not handled yet: that is written to Log
// and the verification goes on at the agent's size.
func (d *Docker) OpenDiskForVerifier(ctx context.Context, id string) (full bool, err error) {
	ins, err := d.Client.ContainerInspect(ctx, id)
	if err != nil {
		return false, err
	}
	size := ins.HostConfig.StorageOpt["size"]
	if size == "" {
		return false, nil
	}
	mb, err := strconv.ParseInt(strings.TrimSuffix(size, "M"), 10, 64)
	if err != nil {
		return false, fmt.Errorf("sandbox %s: storage size %q is not DiskLimit's NNNM", id, size)
	}
	if ins.GraphDriver.Name != "btrfs" {
		fmt.Fprintf(d.Log, "sandbox: WARNING: %s: the verifier's headroom is raised for the btrfs driver only, not %s: a sandbox its agent filled may fail to verify\n", id, ins.GraphDriver.Name)
		return false, nil
	}
	root, m, err := d.btrfsSubvolume(ctx, ins)
	if err != nil {
		return false, err
	}
	sub := filepath.Join(root, "btrfs/subvolumes", m)
	q, err := qgroupOf(ctx, sub)
	if err != nil {
		return false, fmt.Errorf("sandbox %s: %w", id, err)
	}
	full, qgroup := q.full(), q.id
	// The group named must be this subvolume's own (0/<its root ID>): the
	// limit below is set by ID, and another sandbox's must never be raised.
	rid, err := exec.CommandContext(ctx, "btrfs", "inspect-internal", "rootid", sub).CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("sandbox %s: btrfs inspect-internal rootid %s: %v: %s", id, sub, err, strings.TrimSpace(string(rid)))
	}
	if want := "0/" + strings.TrimSpace(string(rid)); qgroup != want {
		return false, fmt.Errorf("sandbox %s: btrfs qgroup show %s named quota group %s, want its own %s", id, sub, qgroup, want)
	}
	limit := (mb + VerifierHeadroomMB) << 20
	// The driver applies the size recorded here again each time it mounts
	// the subvolume (docker cp does): it must say the raised one.
	if err := os.WriteFile(filepath.Join(root, "btrfs/quotas", m), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return false, fmt.Errorf("sandbox %s: record its raised size: %w", id, err)
	}
	// The limit is set by quota group ID through the directory that holds
	// the subvolumes, not through the subvolume's own path: the ioctl's
	// transaction reserves metadata in the root of the path it is given, and
	// in a subvolume its agent filled that reservation is refused ("unable
	// to limit requested quota group: Disk quota exceeded", seen in
	// TestAdversarialCheatsNeverResolve's slow disk-fill on kernel 6.18).
	parent := filepath.Dir(sub)
	if out, err := exec.CommandContext(ctx, "btrfs", "qgroup", "limit", strconv.FormatInt(limit, 10), qgroup, parent).CombinedOutput(); err != nil {
		return false, fmt.Errorf("sandbox %s: btrfs qgroup limit %d %s %s: %v: %s", id, limit, qgroup, parent, err, strings.TrimSpace(string(out)))
	}
	return full, nil
}

// btrfsSubvolume names a btrfs-driver container's subvolume: the daemon's
// root directory and the layer's mount ID (its subvolume is
// <root>/btrfs/subvolumes/<mount ID>). The daemon must be on this host.
func (d *Docker) btrfsSubvolume(ctx context.Context, ins container.InspectResponse) (root, mountID string, err error) {
	info, err := d.Client.Info(ctx)
	if err != nil {
		return "", "", err
	}
	mid, err := os.ReadFile(filepath.Join(info.DockerRootDir, "image/btrfs/layerdb/mounts", ins.ID, "mount-id"))
	if err != nil {
		return "", "", fmt.Errorf("sandbox %s: its btrfs subvolume (is the daemon on this host?): %w", ins.ID, err)
	}
	return info.DockerRootDir, strings.TrimSpace(string(mid)), nil
}

// qgroup is one subvolume's quota group as btrfs qgroup show -ref reports it.
type qgroup struct {
	id                  string // 0/N
	rfer, excl, maxRfer int64
}

// full says whether the group holds its limit, to within 1 MB (the agent ran
// out of storage_mb).
func (q qgroup) full() bool { return q.rfer >= q.maxRfer-1<<20 }

// qgroupOf reads the subvolume's quota group.
func qgroupOf(ctx context.Context, sub string) (qgroup, error) {
	out, err := exec.CommandContext(ctx, "btrfs", "qgroup", "show", "-ref", "--raw", sub).CombinedOutput()
	if err != nil {
		return qgroup{}, fmt.Errorf("btrfs qgroup show %s: %v: %s", sub, err, strings.TrimSpace(string(out)))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "0/") {
			continue
		}
		rfer, err1 := strconv.ParseInt(f[1], 10, 64)
		excl, err2 := strconv.ParseInt(f[2], 10, 64)
		lim, err3 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			break
		}
		return qgroup{id: f[0], rfer: rfer, excl: excl, maxRfer: lim}, nil
	}
	return qgroup{}, fmt.Errorf("btrfs qgroup show %s: no quota group line in %q", sub, out)
}

// WrittenMB is how much the sandbox wrote to its writable layer, in MB:
// its btrfs quota group's exclusive bytes where the btrfs driver limits it
// (which reports no SizeRw under simple quotas), else docker's SizeRw.
func (d *Docker) WrittenMB(ctx context.Context, ins container.InspectResponse) (int64, error) {
	if ins.GraphDriver.Name == "btrfs" && ins.HostConfig.StorageOpt["size"] != "" {
		root, m, err := d.btrfsSubvolume(ctx, ins)
		if err != nil {
			return 0, err
		}
		q, err := qgroupOf(ctx, filepath.Join(root, "btrfs/subvolumes", m))
		if err != nil {
			return 0, err
		}
		return q.excl >> 20, nil
	}
	n, err := DiskUsage(ctx, d.Client, ins.ID)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("sandbox %s: the %s driver reports no writable-layer size", ins.ID, ins.GraphDriver.Name)
	}
	return n >> 20, nil
}
