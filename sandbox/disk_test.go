package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

func TestDiskLimitIsEnforced(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	plan, err := sandbox.DiskLimit(ctx, r.cli, r.baseTag(), 50)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", plan.Why)
	if !plan.Watch && plan.StorageOpt["size"] == "" {
		t.Fatalf("plan %+v: neither a size nor a watch", plan)
	}
	// The watcher is the fallback wherever the kernel cannot: it is tested
	// on every daemon, on a sandbox created without a size.
	id := r.sandbox(r.baseTag())
	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() { done <- sandbox.DiskWatch(wctx, r.cli, id, 50, 500*time.Millisecond) }()
	// A slow bomb (60 files of 10 MB, 0.2 s apart: 600 MB over 12 s or
	// more) must be cut off well before it ends. How soon a poll sees it
	// depends on how busy the daemon is (CI runs several packages' containers
	// at once: a poll there took seconds, and a 400 MB bomb at 0.1 s got to
	// 228 MB), so the bound is the bomb not finishing, with room to spare,
	// not a poll count.
	const files, fileMB = 60, 10
	start := time.Now()
	r.exec(id, []string{"bash", "-c", "for i in $(seq 1 " + strconv.Itoa(files) + "); do head -c " + strconv.Itoa(fileMB*1000000) + " /dev/zero > /tmp/f$i; sleep 0.2; done"}, nil, "")
	err = <-done
	var ex sandbox.DiskExceeded
	if !errors.As(err, &ex) {
		t.Fatalf("DiskWatch: %v", err)
	}
	ins, _ := r.cli.ContainerInspect(ctx, id)
	t.Logf("%v after %s; container running: %v", ex, time.Since(start), ins.State.Running)
	if ins.State.Running {
		t.Fatalf("over the limit and still running: %v", ex)
	}
	if whole := int64(files*fileMB*1000000) * 2 / 3; ex.Used > whole {
		t.Fatalf("not stopped in time: %v, two thirds of the bomb got through", ex)
	}
}

// TestDiskLimitEnforcedByKernel runs a fast disk bomb (1 GB from /dev/zero,
// as fast as the disk takes it: a watcher polling every 2 s sees GBs go by)
// in a sandbox started as rollouts start theirs (Docker.Start, storage_mb =
// 64) on the daemon sandboxes use by default (NewDocker: the quota daemon
// that scripts/ensure-sandbox-host.sh starts, unless DOCKER_HOST names
// another): the write ends at the limit with "no space" or "quota exceeded",
// the sandbox's layer holds no more than the limit, and the filesystem under
// the daemon's data root grows by no more than that. The same bomb in a
// sandbox without the size gets through. It fails where the kernel does not
// enforce storage_mb; only T1FLOW_ALLOW_WATCHED_DISK=1 (a host where the
// setup cannot start the quota daemon, as its output says) makes that a skip.
func TestDiskLimitEnforcedByKernel(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	d, err := sandbox.NewDocker(ctx, testenv.StateDir())
	if err != nil {
		t.Fatal(err)
	}
	var said bytes.Buffer
	d.Log = &said
	q, base := d.Client, r.baseTag()
	name := "t1flow-disktest-" + strconv.Itoa(os.Getpid())
	id, err := d.Start(ctx, name, base, sandbox.Limits{CPUs: 1, MemoryMB: 512, Pids: 256, StorageMB: 64}, nil, map[string]string{"t1flow.sealtest": "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer q.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
	t.Logf("%s: %s", d.Daemon, strings.TrimSpace(said.String()))
	ins, err := q.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ins.HostConfig.StorageOpt["size"] == "" {
		if os.Getenv("T1FLOW_ALLOW_WATCHED_DISK") == "1" {
			t.Skipf("T1FLOW_ALLOW_WATCHED_DISK=1: storage_mb is only watched here (%s)", said.String())
		}
		t.Fatalf("the kernel does not enforce storage_mb on the sandboxes' daemon, %s (%s): run scripts/ensure-sandbox-host.sh as root, which starts the quota daemon", d.Daemon, said.String())
	}
	if !strings.Contains(said.String(), "enforced by the kernel") {
		t.Errorf("the sandbox log does not say the kernel enforces storage_mb: %q", said.String())
	}
	info, err := q.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := usedBytes(t, info.DockerRootDir)
	start := time.Now()
	out := execOn(t, q, id, "head -c 1000000000 /dev/zero > /bomb; echo rc=$?; stat -c %s /bomb")
	took := time.Since(start)
	used, err := sandbox.DiskUsage(ctx, q, id)
	if err != nil {
		t.Fatal(err)
	}
	grew := usedBytes(t, info.DockerRootDir) - before
	t.Logf("disk bomb: %s in %s; writable layer %d MB; %s grew by %d MB", strings.Join(strings.Fields(out), " "), took, used>>20, info.DockerRootDir, grew>>20)
	if !strings.Contains(out, "rc=1") || !(strings.Contains(out, "No space left") || strings.Contains(out, "quota exceeded")) {
		t.Errorf("the write did not fail at the limit: %s", out)
	}
	if used > 72<<20 {
		t.Errorf("the sandbox wrote %d MB against a 64 MB limit", used>>20)
	}
	// The bomb's own size: the btrfs driver reports no writable-layer size
	// (-1), and a limit that counted the image's size twice (a full quota
	// group's sizing under simple quotas) let 400 MB through.
	if f := strings.Fields(out); len(f) == 0 {
		t.Errorf("no size of /bomb in %q", out)
	} else if n, err := strconv.ParseInt(f[len(f)-1], 10, 64); err != nil || n > 72<<20 {
		t.Errorf("the bomb wrote %s bytes against a 64 MB limit (%v)", f[len(f)-1], err)
	}
	// Other tests may write beside this one; a bomb that got through would
	// show as about 1 GB.
	if grew > 400<<20 {
		t.Errorf("the host's filesystem under %s grew by %d MB during a bomb limited to 64 MB", info.DockerRootDir, grew>>20)
	}
	// The defence off: the same daemon, a sandbox created without the size.
	// A smaller bomb (300 MB) must get through whole, else the limit above
	// may have been the disk's, not storage_mb's.
	off, err := q.ContainerCreate(ctx, &container.Config{Image: base, Cmd: []string{"sleep", "300"}},
		&container.HostConfig{NetworkMode: "none", CapDrop: []string{"ALL"}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer q.ContainerRemove(context.Background(), off.ID, container.RemoveOptions{Force: true})
	if err := q.ContainerStart(ctx, off.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	out = execOn(t, q, off.ID, "head -c 300000000 /dev/zero > /bomb; echo rc=$?")
	used, err = sandbox.DiskUsage(ctx, q, off.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without the size: %s; writable layer %d MB", strings.TrimSpace(out), used>>20)
	if !strings.Contains(out, "rc=0") || used < 280<<20 {
		t.Errorf("without the size the 300 MB bomb should get through: %s, %d MB", out, used>>20)
	}
}

// usedBytes is how much of the filesystem holding dir is in use.
func usedBytes(t *testing.T, dir string) int64 {
	t.Helper()
	syscall.Sync() // btrfs counts what it has committed
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// execOn runs a shell command in a container of client q and returns its
// output.
func execOn(t *testing.T, q *client.Client, id, script string) string {
	t.Helper()
	ctx := context.Background()
	ex, err := q.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"bash", "-c", script}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	hj, err := q.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Close()
	var b bytes.Buffer
	stdcopy.StdCopy(&b, &b, hj.Reader)
	return b.String()
}

// TestVerifierRunsOnAFullSandbox fills a kernel-limited sandbox (storage_mb
// = 64) to its limit as an agent would, then verifies it sealed: the
// verifier still stages its tests, runs and reports (the task unsolved),
// so a full disk is the agent's failure, never an infrastructure error to
// retry or a way out of a score.
func TestVerifierRunsOnAFullSandbox(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	d, err := sandbox.NewDocker(ctx, testenv.StateDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureToolchain(ctx); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(testenv.RepoRoot(), "examples/tb2/word-frequency")
	img := r.image(dir, r.baseTag())
	id, err := d.Start(ctx, "t1flow-fulltest-"+strconv.Itoa(os.Getpid()), img, sandbox.Limits{CPUs: 1, MemoryMB: 512, Pids: 256, StorageMB: 64}, nil, map[string]string{"t1flow.sealtest": "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.cli.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
	ins, _ := r.cli.ContainerInspect(ctx, id)
	if ins.HostConfig.StorageOpt["size"] == "" {
		t.Skip("storage_mb is not enforced by the kernel here (TestDiskLimitEnforcedByKernel says why)")
	}
	// Filled to the brim (4 KB blocks, then inodes and dirs until none fit):
	// a subvolume filled that far refused the headroom's own quota call when
	// it went through the subvolume's path (OpenDiskForVerifier says why).
	code, out := r.exec(id, []string{"bash", "-c", "head -c 1000000000 /dev/zero > /app/bomb; echo rc=$?; " +
		"dd if=/dev/zero of=/app/brim bs=4k 2>/dev/null; for i in 1 2 3 4 5 6 7 8; do echo x > /app/s$i; mkdir /tmp/d$i; done 2>/dev/null; sync; " +
		"head -c 100000 /dev/zero > /tmp/more; echo rc=$?"}, nil, "")
	if strings.Count(out, "rc=1") != 2 {
		t.Fatalf("the sandbox is not full: %d %s", code, out)
	}
	// A sandbox whose agent wrote little is not reported full.
	calm, err := d.Start(ctx, "t1flow-calmtest-"+strconv.Itoa(os.Getpid()), img, sandbox.Limits{CPUs: 1, MemoryMB: 512, Pids: 256, StorageMB: 64}, nil, map[string]string{"t1flow.sealtest": "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.cli.ContainerRemove(context.Background(), calm, container.RemoveOptions{Force: true})
	r.exec(calm, []string{"bash", "-c", "head -c 10000000 /dev/zero > /app/small"}, nil, "")
	if full, err := d.OpenDiskForVerifier(ctx, calm); err != nil || full {
		t.Errorf("a sandbox with 10 MB written of 64: full %v, %v", full, err)
	}
	// Without the headroom the verifier cannot even stage its tests.
	if err := r.cli.CopyToContainer(ctx, id, "/", tarOf(t, "t1flow-stage-probe", 1<<20), container.CopyToContainerOptions{}); err == nil {
		t.Errorf("a 1 MB copy into the full sandbox succeeded: it is not full, this shows nothing")
	} else {
		t.Logf("before the headroom: %v", err)
	}
	full, err := d.OpenDiskForVerifier(ctx, id)
	if err != nil || !full {
		t.Fatalf("OpenDiskForVerifier: full %v, %v", full, err)
	}
	v := r.verify(id, dir)
	t.Logf("full sandbox: %d/%d passed, reward %q, marked %v, in %s", v.passed, v.total, v.reward, v.marked, v.took)
	if v.total != 5 || v.passed != 0 || !v.marked {
		t.Fatalf("the verifier did not run on the full sandbox: %d/%d, marked %v\n%s", v.passed, v.total, v.marked, v.output)
	}
}

// tarOf is a tar stream holding one file of n zero bytes.
func tarOf(t *testing.T, name string, n int) io.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(n)}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, n))
	tw.Close()
	return &b
}
