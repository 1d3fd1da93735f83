package activities

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sync/singleflight"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/task"
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

// DefaultAliases point registry bases that tasks commonly name at the local base
// image: nothing is ever pulled.
var DefaultAliases = map[string]string{
	"ubuntu:*":         "@base",
	"ubuntu":           "@base",
	"debian:*":         "@base",
	"debian":           "@base",
	"python:*":         "@base",
	"buildpack-deps:*": "@base",
	"bash:*":           "@base",
}

// Docker wraps the Docker client with t1flow's image rules.
type Docker struct {
	Client *client.Client
	// Aliases maps FROM image patterns ('*' matches anything) to local images;
	// "@base" is the sandbox base image.
	Aliases map[string]string
	// StateDir holds build locks and the debootstrap scratch space.
	StateDir string
	// Mirror is the Debian mirror for debootstrap; empty reads the apt sources.
	Mirror string
	Log    io.Writer

	builds singleflight.Group
	// present remembers images seen on the daemon: tags are content hashes, so
	// a tag once present means the same image (a sandbox create that finds it
	// gone forgets it).
	present sync.Map
}

// NewDocker connects to the daemon named by DOCKER_HOST (or the default
// socket), negotiating the API version, and checks that it answers.
func NewDocker(ctx context.Context, stateDir string) (*Docker, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		return nil, fmt.Errorf("docker daemon does not answer (%v): run scripts/ensure-sandbox-host.sh, or install Docker and start dockerd", err)
	}
	aliases := map[string]string{}
	for k, v := range DefaultAliases {
		aliases[k] = v
	}
	return &Docker{Client: cli, Aliases: aliases, StateDir: stateDir, Log: io.Discard}, nil
}

// LoadAliases merges an alias file (TOML: [aliases] "pattern" = "image").
func (d *Docker) LoadAliases(path string) error {
	var f struct{ Aliases map[string]string }
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, k := range md.Undecoded() {
		return fmt.Errorf("%s: unknown key %s (expected only [aliases])", path, k)
	}
	for k, v := range f.Aliases {
		d.Aliases[k] = v
	}
	return nil
}

func (d *Docker) imageExists(ctx context.Context, ref string) (bool, error) {
	if _, ok := d.present.Load(ref); ok {
		return true, nil
	}
	_, err := d.Client.ImageInspect(ctx, ref)
	if err == nil {
		d.present.Store(ref, true)
		return true, nil
	}
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return false, err
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

var fromLine = regexp.MustCompile(`(?i)^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$`)

// RewriteFrom maps each FROM image through the alias map. Stage names stay as they are.
func (d *Docker) RewriteFrom(dockerfile, base string) (string, []string, error) {
	lines := strings.Split(dockerfile, "\n")
	stages := map[string]bool{}
	var used []string
	for i, l := range lines {
		m := fromLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		img, rest := m[3], m[4]
		if stages[strings.ToLower(img)] {
			continue
		}
		target := d.alias(img)
		if target == "@base" {
			target = base
		}
		lines[i] = m[1] + m[2] + target + rest
		used = append(used, target)
		// Later FROMs may name this stage.
		if f := strings.Fields(rest); len(f) == 2 && strings.EqualFold(f[0], "AS") {
			stages[strings.ToLower(f[1])] = true
		}
	}
	if len(used) == 0 {
		return "", nil, errors.New("has no FROM instruction")
	}
	return strings.Join(lines, "\n"), used, nil
}

func (d *Docker) alias(img string) string {
	if v, ok := d.Aliases[img]; ok {
		return v
	}
	// Longest pattern first, so "python:3.11-slim" can beat "python:*".
	pats := make([]string, 0, len(d.Aliases))
	for p := range d.Aliases {
		pats = append(pats, p)
	}
	sort.Slice(pats, func(i, j int) bool { return len(pats[i]) > len(pats[j]) })
	for _, p := range pats {
		if globMatch(p, img) {
			return d.Aliases[p]
		}
	}
	return img
}

func globMatch(pat, s string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pat), `\*`, ".*") + "$"
	ok, _ := regexp.MatchString(re, s)
	return ok
}

// TaskImageTag is the cached image for a task: its content hash plus the hash
// of the alias targets it was built from.
func TaskImageTag(taskID, fromHash string) string {
	return "t1flow-task:" + taskID + "-" + fromHash
}

// EnsureTaskImage builds the task's environment/Dockerfile once, with FROM
// lines pointed at local images. A Dockerfile step that fails is the task's
// fault (TaskInvalid); a daemon that fails is infrastructure.
func (d *Docker) EnsureTaskImage(ctx context.Context, t *task.Task, progress func(string)) (string, bool, error) {
	base, err := d.EnsureBaseImage(ctx)
	if err != nil {
		return "", false, errs.Infraf("base image: %v", err)
	}
	dfPath := filepath.Join(t.Dir, task.DockerfileFile)
	raw, err := os.ReadFile(dfPath)
	if err != nil {
		return "", false, errs.TaskInvalidf("%s: %v", task.DockerfileFile, err)
	}
	df, used, err := d.RewriteFrom(string(raw), base)
	if err != nil {
		return "", false, errs.TaskInvalidf("%s: %v", task.DockerfileFile, err)
	}
	h := sha256.Sum256([]byte(df))
	tag := TaskImageTag(t.ID, hex.EncodeToString(h[:])[:8])
	built := false
	_, err, _ = d.builds.Do(tag, func() (any, error) {
		if ok, err := d.imageExists(ctx, tag); err != nil {
			return nil, errs.Infraf("docker image inspect %s: %v", tag, err)
		} else if ok {
			return nil, nil
		}
		for _, u := range used {
			ok, err := d.imageExists(ctx, u)
			if err != nil {
				return nil, errs.Infraf("docker image inspect %s: %v", u, err)
			}
			if !ok {
				return nil, errs.TaskInvalidf("%s: FROM %s is not available offline and nothing is ever pulled: build it locally or add an image alias for it", task.DockerfileFile, u)
			}
		}
		built = true
		return nil, d.build(ctx, t, df, tag, progress)
	})
	return tag, built, err
}

func (d *Docker) build(ctx context.Context, t *task.Task, dockerfile, tag string, progress func(string)) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(tarContext(filepath.Join(t.Dir, "environment"), dockerfile, pw))
	}()
	bctx, cancel := context.WithTimeout(ctx, time.Duration(t.Config.BuildTimeoutSec*float64(time.Second)))
	defer cancel()
	resp, err := d.Client.ImageBuild(bctx, pr, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Version:     build.BuilderV1,
		Labels:      map[string]string{"t1flow.task": t.ID},
	})
	if err != nil {
		return errs.Infraf("docker build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	var tail []string
	dec := jsonmessage.DisplayJSONMessagesStream
	lw := &lineWriter{fn: func(l string) {
		tail = append(tail, l)
		if len(tail) > 20 {
			tail = tail[1:]
		}
		if progress != nil {
			progress(l)
		}
	}}
	if err := dec(resp.Body, lw, 0, false, nil); err != nil {
		if bctx.Err() != nil {
			return errs.TaskInvalidf("%s: build did not finish within environment.build_timeout_sec = %v", task.DockerfileFile, t.Config.BuildTimeoutSec)
		}
		var jerr *jsonmessage.JSONError
		if errors.As(err, &jerr) {
			return errs.TaskInvalidf("%s: build failed: %s\n%s", task.DockerfileFile, jerr.Message, strings.Join(tail, "\n"))
		}
		return errs.Infraf("docker build %s: %v", tag, err)
	}
	return nil
}

type lineWriter struct {
	fn  func(string)
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		if l := strings.TrimSpace(string(w.buf[:i])); l != "" {
			w.fn(l)
		}
		w.buf = w.buf[i+1:]
	}
}

// ExecOptions are the knobs of one command in a sandbox.
type ExecOptions struct {
	Timeout  time.Duration // killed (with its process group) after this
	User     string
	WorkDir  string
	Env      []string
	HeadCap  int
	TailCap  int
	Progress func() // called every few seconds while the command runs
}

// ExecResult is what a command did.
type ExecResult struct {
	ExitCode int
	Output   string // stdout and stderr interleaved, capped
	Bytes    int64  // total output bytes
	Dropped  int64  // bytes left out of Output
	TimedOut bool
	Duration time.Duration
}

// ErrContainerGone means the sandbox no longer exists or no longer runs.
var ErrContainerGone = errors.New("sandbox container is gone")

// Exec runs script with bash -c in the container under coreutils timeout, so
// the whole process group dies at the deadline even if the client goes away.
func (d *Docker) Exec(ctx context.Context, id, script string, o ExecOptions) (ExecResult, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	secs := fmt.Sprintf("%.3f", o.Timeout.Seconds())
	return d.exec(ctx, id, []string{"timeout", "-k", "5", secs, "bash", "-c", script}, o)
}

func (d *Docker) exec(ctx context.Context, id string, cmd []string, o ExecOptions) (ExecResult, error) {
	if o.HeadCap == 0 && o.TailCap == 0 {
		o.HeadCap, o.TailCap = 8<<10, 8<<10
	}
	start := time.Now()
	resp, err := d.Client.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: cmd, AttachStdout: true, AttachStderr: true, User: o.User, WorkingDir: o.WorkDir, Env: o.Env,
	})
	if err != nil {
		if errdefs.IsNotFound(err) || errdefs.IsConflict(err) {
			return ExecResult{}, fmt.Errorf("%w: %v", ErrContainerGone, err)
		}
		return ExecResult{}, err
	}
	hj, err := d.Client.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		return ExecResult{}, err
	}
	defer hj.Close()
	buf := NewCappedBuffer(o.HeadCap, o.TailCap)
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(buf, buf, hj.Reader)
		done <- err
	}()
	// The Go-side deadline is a backstop behind the in-container timeout.
	backstop := time.NewTimer(o.Timeout + 15*time.Second)
	defer backstop.Stop()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if o.Progress != nil {
				o.Progress()
			}
		case <-backstop.C:
			hj.Close()
			<-done
			return ExecResult{ExitCode: -1, Output: buf.String(), Bytes: buf.Total(), Dropped: buf.Dropped(), TimedOut: true, Duration: time.Since(start)}, nil
		case <-ctx.Done():
			hj.Close()
			<-done
			return ExecResult{}, ctx.Err()
		}
	}
	if err != nil {
		return ExecResult{}, fmt.Errorf("reading exec output: %w", err)
	}
	var code int
	for i := 0; ; i++ {
		ins, err := d.Client.ContainerExecInspect(ctx, resp.ID)
		if err != nil {
			return ExecResult{}, err
		}
		if !ins.Running || i > 100 {
			code = ins.ExitCode
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	dur := time.Since(start)
	return ExecResult{
		ExitCode: code, Output: buf.String(), Bytes: buf.Total(), Dropped: buf.Dropped(),
		TimedOut: (code == 124 || code == 137) && dur >= o.Timeout, Duration: dur,
	}, nil
}

// tarContext writes the build context (the environment/ directory) with the
// rewritten Dockerfile in place of the original.
func tarContext(envDir, dockerfile string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(envDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(envDir, p)
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "Dockerfile" {
			b = []byte(dockerfile)
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
