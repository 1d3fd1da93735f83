package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/image"
)

// BasePackages is the sandbox base image's recipe: Debian bookworm minbase plus
// what terminal tasks commonly need. Changing it changes the base image tag.
var BasePackages = []string{
	"bash", "coreutils", "findutils", "grep", "sed", "gawk", "diffutils", "patch",
	"tar", "gzip", "bzip2", "xz-utils", "zip", "unzip", "file", "less", "procps",
	"psmisc", "tmux", "git", "python3", "python3-pytest", "python-is-python3",
	"jq", "sqlite3", "bc", "make", "cron", "ca-certificates", "curl", "iproute2",
	"vim-tiny", "nano", "sudo", "passwd", "adduser",
}

const baseSuite = "bookworm"

// BaseImageTag names the base image by a hash of its recipe, so a recipe change
// builds a new image and never reuses a stale one.
func BaseImageTag() string {
	h := sha256.Sum256([]byte(baseSuite + "\n" + strings.Join(BasePackages, "\n")))
	return "t1flow-base:" + hex.EncodeToString(h[:])[:12]
}

// lockFile serialises builds across processes on this host.
func (d *Docker) lockFile(name string) (func(), error) {
	dir := filepath.Join(d.StateDir, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// EnsureBaseImage builds the base image offline with debootstrap and imports
// it, once per recipe. Concurrent callers, in this process or others, wait for
// one build.
func (d *Docker) EnsureBaseImage(ctx context.Context) (string, error) {
	tag := BaseImageTag()
	_, err, _ := d.builds.Do(tag, func() (any, error) {
		if ok, err := d.imageExists(ctx, tag); err != nil || ok {
			return nil, err
		}
		unlock, err := d.lockFile("base")
		if err != nil {
			return nil, err
		}
		defer unlock()
		if ok, err := d.imageExists(ctx, tag); err != nil || ok {
			return nil, err
		}
		return nil, d.buildBase(ctx, tag)
	})
	return tag, err
}

func (d *Docker) buildBase(ctx context.Context, tag string) error {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return errors.New("debootstrap is not installed: apt-get install debootstrap (the base image is built offline from the Debian mirror)")
	}
	mirror := d.Mirror
	if mirror == "" {
		mirror = os.Getenv("T1FLOW_DEBIAN_MIRROR")
	}
	if mirror == "" {
		mirror = AptMirror()
	}
	// Leftovers of an interrupted build (we hold the build lock, so none is live).
	old, _ := filepath.Glob(filepath.Join(d.StateDir, "rootfs-*"))
	for _, o := range old {
		unmountUnder(o)
		os.RemoveAll(o)
	}
	root, err := os.MkdirTemp(d.StateDir, "rootfs-")
	if err != nil {
		return err
	}
	// debootstrap mounts /proc and /sys inside the target; a build that was
	// interrupted leaves them mounted, and removing through them must never happen.
	defer func() {
		unmountUnder(root)
		os.RemoveAll(root)
	}()
	fmt.Fprintf(d.Log, "building base image %s: debootstrap %s from %s (a few minutes, once)\n", tag, baseSuite, mirror)
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(BasePackages, ","), baseSuite, root, mirror)
	cmd.Stdout, cmd.Stderr = d.Log, d.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debootstrap failed: %w (see the log above)", err)
	}
	// Make the rootfs smaller and the sandboxes predictable.
	for _, p := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		entries, _ := os.ReadDir(filepath.Join(root, p))
		for _, e := range entries {
			if e.Name() != "partial" && e.Name() != "lock" {
				os.RemoveAll(filepath.Join(root, p, e.Name()))
			}
		}
	}
	for _, p := range []string{"logs/agent", "logs/verifier", "app"} {
		os.MkdirAll(filepath.Join(root, p), 0o755)
	}
	tarCmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", root, "-c", ".")
	out, err := tarCmd.StdoutPipe()
	if err != nil {
		return err
	}
	tarCmd.Stderr = d.Log
	if err := tarCmd.Start(); err != nil {
		return err
	}
	rc, err := d.Client.ImageImport(ctx, image.ImportSource{Source: out, SourceName: "-"}, tag, image.ImportOptions{
		Message: "t1flow sandbox base (" + baseSuite + " minbase)",
		Changes: []string{
			`ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
			`ENV LANG=C.UTF-8`,
			`WORKDIR /app`,
			`CMD ["bash"]`,
		},
	})
	if err != nil {
		tarCmd.Process.Kill()
		tarCmd.Wait()
		return fmt.Errorf("docker import: %w", err)
	}
	_, cerr := io.Copy(io.Discard, rc)
	rc.Close()
	if werr := tarCmd.Wait(); werr != nil {
		return fmt.Errorf("tar of the rootfs: %w", werr)
	}
	if cerr != nil {
		return cerr
	}
	fmt.Fprintf(d.Log, "base image %s ready\n", tag)
	return nil
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			points = append(points, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// AptMirror reads this machine's Debian mirror from its apt sources.
func AptMirror() string {
	if b, err := os.ReadFile("/etc/apt/sources.list.d/debian.sources"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "URIs:" && !strings.Contains(f[1], "security") {
				return f[1]
			}
		}
	}
	if b, err := os.ReadFile("/etc/apt/sources.list"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "deb" && !strings.Contains(f[1], "security") {
				return f[1]
			}
		}
	}
	return "http://deb.debian.org/debian"
}
