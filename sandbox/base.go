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
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/image"

	"github.com/t1flow/t1flow/internal/task"
)

// BasePackages is the sandbox base images' recipe: a Debian minbase plus what
// terminal tasks commonly need, pip and venv included (the python bases are
// the same root filesystem without the EXTERNALLY-MANAGED marker). Changing
// it changes every base image tag.
var BasePackages = []string{
	"bash", "coreutils", "findutils", "grep", "sed", "gawk", "diffutils", "patch",
	"tar", "gzip", "bzip2", "xz-utils", "zip", "unzip", "file", "less", "procps",
	"psmisc", "tmux", "git", "python3", "python3-pytest", "python-is-python3",
	"python3-pip", "python3-venv",
	"jq", "sqlite3", "bc", "make", "cron", "ca-certificates", "curl", "iproute2",
	"vim-tiny", "nano", "sudo", "passwd", "adduser",
}

// suiteLater are packages of a suite's recipe installed with apt in the new
// root after debootstrap: bookworm's debootstrap cannot order trixie's
// systemd pre-dependencies, which cron pulls in unless
// systemd-standalone-sysusers stands in for systemd.
var suiteLater = map[string][]string{
	task.BaseTrixie: {"cron", "systemd-standalone-sysusers"},
}

// suitePackages are what debootstrap installs, and what apt adds after.
func suitePackages(suite string) (first, later []string) {
	later = suiteLater[suite]
	for _, p := range BasePackages {
		if !slices.Contains(later, p) {
			first = append(first, p)
		}
	}
	return first, later
}

// rootMode is the base images' / (as Debian's and the official images').
const rootMode = 0o755

// BaseImageTag is the default base (Debian bookworm), the one the sealed
// verifier toolchain is exported from.
func BaseImageTag() string { return BaseTag(task.BaseBookworm) }

// BaseTag names a base image by a hash of its recipe (suite and packages),
// so a recipe change builds a new image and never reuses a stale one. A
// python base shares its suite's root filesystem and debootstrap run.
func BaseTag(base string) string {
	suite := task.BaseSuite(base)
	recipe := suite + "\n" + strings.Join(BasePackages, "\n") + fmt.Sprintf("\nroot %o", rootMode)
	if later := suiteLater[suite]; len(later) > 0 {
		recipe += "\nlater:" + strings.Join(later, ",")
	}
	h := sha256.Sum256([]byte(recipe))
	tag := "t1flow-base:" + hex.EncodeToString(h[:])[:12]
	if suite != "bookworm" {
		tag += "-" + suite
	}
	if base != suite {
		tag += "-python"
	}
	return tag
}

// knownBase reports whether base names one of the bases t1flow builds.
func knownBase(base string) bool {
	switch base {
	case task.BaseBookworm, task.BaseTrixie, task.BasePythonBookworm, task.BasePythonTrixie:
		return true
	}
	return false
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

// EnsureBaseImage builds the default (bookworm) base image; see EnsureBase.
func (d *Docker) EnsureBaseImage(ctx context.Context) (string, error) {
	return d.EnsureBase(ctx, task.BaseBookworm)
}

// EnsureBase builds a base image offline with debootstrap and imports it,
// once per recipe: one debootstrap per suite imports both the plain and the
// python image. Concurrent callers, in this process or others, wait for one
// build.
func (d *Docker) EnsureBase(ctx context.Context, base string) (string, error) {
	if !knownBase(base) {
		return "", fmt.Errorf("unknown base %q (expected %s, %s, %s or %s)", base, task.BaseBookworm, task.BaseTrixie, task.BasePythonBookworm, task.BasePythonTrixie)
	}
	tag := BaseTag(base)
	suite := task.BaseSuite(base)
	_, err, _ := d.builds.Do(tag, func() (any, error) {
		if ok, err := d.imageExists(ctx, tag); err != nil || ok {
			return nil, err
		}
		unlock, err := d.lockFile("base-" + suite)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if ok, err := d.imageExists(ctx, tag); err != nil || ok {
			return nil, err
		}
		return nil, d.buildBase(ctx, suite)
	})
	return tag, err
}

func (d *Docker) buildBase(ctx context.Context, suite string) error {
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
	old, _ := filepath.Glob(filepath.Join(d.StateDir, "rootfs-"+suite+"-*"))
	for _, o := range old {
		unmountUnder(o)
		os.RemoveAll(o)
	}
	root, err := os.MkdirTemp(d.StateDir, "rootfs-"+suite+"-")
	if err != nil {
		return err
	}
	// The import takes the image's / from this directory, which MkdirTemp
	// made 0700: every user but root would be refused everything (exec of
	// any program: "libc.so.6: Permission denied").
	if err := os.Chmod(root, rootMode); err != nil {
		return err
	}
	// debootstrap mounts /proc and /sys inside the target; a build that was
	// interrupted leaves them mounted, and removing through them must never happen.
	defer func() {
		unmountUnder(root)
		os.RemoveAll(root)
	}()
	tag, pyTag := BaseTag(suite), BaseTag("python-"+suite)
	fmt.Fprintf(d.Log, "building base images %s and %s: debootstrap %s from %s (a few minutes, once)\n", tag, pyTag, suite, mirror)
	first, later := suitePackages(suite)
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(first, ","), suite, root, mirror)
	cmd.Stdout, cmd.Stderr = d.Log, d.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debootstrap %s failed: %w (see the log above)", suite, err)
	}
	if len(later) > 0 {
		if err := aptInstall(ctx, root, later, d.Log); err != nil {
			return fmt.Errorf("%s: %w", suite, err)
		}
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
	if err := d.importRootfs(ctx, root, tag, suite+" minbase", nil); err != nil {
		return err
	}
	// The official python images let pip install into the system Python.
	markers, _ := filepath.Glob(filepath.Join(root, "usr/lib/python3*/EXTERNALLY-MANAGED"))
	for _, m := range markers {
		if err := os.Remove(m); err != nil {
			return err
		}
	}
	pyEnv := []string{"ENV PYTHON_VERSION=" + task.BasePython(suite), "ENV PIP_ROOT_USER_ACTION=ignore"}
	if err := d.importRootfs(ctx, root, pyTag, suite+" minbase, python", pyEnv); err != nil {
		return err
	}
	fmt.Fprintf(d.Log, "base images %s and %s ready\n", tag, pyTag)
	return nil
}

// aptInstall installs pkgs in the debootstrapped root from its own sources
// (debootstrap's mirror), then drops the resolver file it needed.
func aptInstall(ctx context.Context, root string, pkgs []string, log io.Writer) error {
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), resolv, 0o644); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(root, "etc/resolv.conf"))
	cmd := exec.CommandContext(ctx, "chroot", root, "sh", "-c",
		"apt-get update -q && apt-get install -y -q --no-install-recommends "+strings.Join(pkgs, " ")+" && apt-get clean")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8"}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get install %s in the new root failed: %w (see the log above)", strings.Join(pkgs, " "), err)
	}
	return nil
}

// importRootfs streams root as a tar into docker import under tag.
func (d *Docker) importRootfs(ctx context.Context, root, tag, what string, extra []string) error {
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
		Message: "t1flow sandbox base (" + what + ")",
		Changes: append([]string{
			`ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
			`ENV LANG=C.UTF-8`,
			`WORKDIR /app`,
			`CMD ["bash"]`,
		}, extra...),
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
	return cerr
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
