package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// On the btrfs storage driver (the quota daemon's, docs/verification.md) a
// container's layer is a btrfs snapshot of its init layer: every inode the
// container never touched is the init layer's, the same inode number with
// the same ctime to the nanosecond, and any change to an inode (its data,
// mode, owner, links, xattrs) sets its ctime to now, which no unprivileged
// process can set back. So snapshotChanges walks the container's subvolume
// beside its init layer's and reports an entry as changed when its inode
// number or ctime differs (or, as docker's naive diff does, its mode, owner,
// device, size or mtime), added when the init layer has no such path, and
// deleted when a changed directory lost it. That is dockerd's btrfs diff
// (its naive one: both trees walked, stat compared) without the daemon's
// round trip, and stricter: the naive diff ignores inode and ctime, so a
// file rewritten in place at its old size with its mtime set back (touch -r)
// is no change to it.

// dataRoots caches each daemon's DockerRootDir by its host address.
var dataRoots sync.Map

func dockerRoot(ctx context.Context, cli *client.Client) (string, error) {
	if v, ok := dataRoots.Load(cli.DaemonHost()); ok {
		return v.(string), nil
	}
	info, err := cli.Info(ctx)
	if err != nil {
		return "", err
	}
	dataRoots.Store(cli.DaemonHost(), info.DockerRootDir)
	return info.DockerRootDir, nil
}

// snapshotChanges reads a btrfs-driver container's changes from its layer
// and its init layer on this host; errNoHostChanges when they cannot be read
// here (another driver, no root, a remote daemon, a layout it does not know).
func snapshotChanges(ctx context.Context, cli *client.Client, ins container.InspectResponse) ([]container.FilesystemChange, error) {
	if ins.GraphDriver.Name != "btrfs" || os.Geteuid() != 0 || ins.ID == "" || strings.ContainsAny(ins.ID, "/.") {
		return nil, errNoHostChanges
	}
	root, err := dockerRoot(ctx, cli)
	if err != nil || !filepath.IsAbs(root) {
		return nil, errNoHostChanges
	}
	mounts := filepath.Join(root, "image", "btrfs", "layerdb", "mounts", ins.ID)
	layer, lerr := layerID(filepath.Join(mounts, "mount-id"))
	init, ierr := layerID(filepath.Join(mounts, "init-id"))
	if lerr != nil || ierr != nil {
		return nil, errNoHostChanges
	}
	subvols := filepath.Join(root, "btrfs", "subvolumes")
	newRoot, oldRoot := filepath.Join(subvols, layer), filepath.Join(subvols, init)
	nst, nerr := os.Lstat(newRoot)
	ost, oerr := os.Lstat(oldRoot)
	if nerr != nil || oerr != nil || !nst.IsDir() || !ost.IsDir() {
		return nil, errNoHostChanges
	}
	w := snapshotWalk{newRoot: newRoot, oldRoot: oldRoot}
	if err := w.dir("/", true, inodeChanged(ost, nst)); err != nil {
		return nil, fmt.Errorf("read %s against %s: %w", newRoot, oldRoot, err)
	}
	return w.out, nil
}

// layerID reads a layer id file of the layer store: one name, no path.
func layerID(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return "", errors.New(p + ": not a layer id")
	}
	return id, nil
}

// snapshotWalk compares the tree under newRoot (the container's layer) with
// the one under oldRoot (its init layer), path by path.
type snapshotWalk struct {
	newRoot, oldRoot string
	out              []container.FilesystemChange
}

func (w *snapshotWalk) add(p string, k container.ChangeType) {
	w.out = append(w.out, container.FilesystemChange{Path: p, Kind: k})
}

// dir compares directory name (present in both trees when inOld, changed
// there when changed) entry by entry; a directory only in the new tree has
// every entry added.
func (w *snapshotWalk) dir(name string, inOld, changed bool) error {
	newDir := filepath.Join(w.newRoot, filepath.FromSlash(name))
	entries, err := os.ReadDir(newDir)
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		seen[e.Name()] = true
		child := path.Join(name, e.Name())
		nfi, err := e.Info()
		if err != nil {
			return err
		}
		var ofi fs.FileInfo
		if inOld {
			ofi, err = os.Lstat(filepath.Join(w.oldRoot, filepath.FromSlash(child)))
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				return err
			}
		}
		mod := ofi != nil && inodeChanged(ofi, nfi)
		switch {
		case ofi == nil:
			w.add(child, container.ChangeAdd)
		case mod:
			w.add(child, container.ChangeModify)
		}
		if nfi.IsDir() {
			if err := w.dir(child, ofi != nil && ofi.IsDir(), mod); err != nil {
				return err
			}
		}
	}
	// A name leaves a directory only by changing it (its ctime), so only a
	// changed directory can have lost entries.
	if !inOld || !changed {
		return nil
	}
	old, err := os.ReadDir(filepath.Join(w.oldRoot, filepath.FromSlash(name)))
	if err != nil {
		return err
	}
	for _, e := range old {
		if !seen[e.Name()] {
			w.add(path.Join(name, e.Name()), container.ChangeDelete)
		}
	}
	return nil
}

// inodeChanged: another inode, or the same one changed since the snapshot
// (ctime), or what docker's naive diff compares.
func inodeChanged(old, cur fs.FileInfo) bool {
	o, ok1 := old.Sys().(*syscall.Stat_t)
	n, ok2 := cur.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return true
	}
	if o.Ino != n.Ino || o.Ctim != n.Ctim || o.Mode != n.Mode || o.Uid != n.Uid || o.Gid != n.Gid || o.Rdev != n.Rdev || o.Mtim != n.Mtim {
		return true
	}
	return !old.IsDir() && o.Size != n.Size
}
