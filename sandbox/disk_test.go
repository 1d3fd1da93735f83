package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

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
	if !plan.Watch {
		if plan.StorageOpt["size"] != "50M" {
			t.Fatalf("plan %+v", plan)
		}
		t.Skip("the daemon enforces sizes itself")
	}
	id := r.sandbox(r.baseTag())
	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() { done <- sandbox.DiskWatch(wctx, r.cli, id, 50, 500*time.Millisecond) }()
	start := time.Now()
	r.exec(id, []string{"bash", "-c", "for i in $(seq 1 40); do head -c 10000000 /dev/zero > /tmp/f$i; sleep 0.1; done"}, nil, "")
	err = <-done
	var ex sandbox.DiskExceeded
	if !errors.As(err, &ex) {
		t.Fatalf("DiskWatch: %v", err)
	}
	ins, _ := r.cli.ContainerInspect(ctx, id)
	t.Logf("%v after %s; container running: %v", ex, time.Since(start), ins.State.Running)
	if ins.State.Running || ex.Used > 200<<20 {
		t.Fatalf("not stopped in time: %v, running %v", ex, ins.State.Running)
	}
}

// TestDiskLimitEnforcedByKernel runs a fast disk bomb (1 GB from /dev/zero,
// as fast as the disk takes it: a watcher polling every 2 s sees GBs go by)
// in a sandbox with storage_mb = 64 on a daemon whose storage the kernel
// limits (T1FLOW_QUOTA_DOCKER_HOST, e.g. the second dockerd of
// scripts/ensure-xfs-docker.sh): the write ends at the limit with "no space"
// or "quota exceeded", and the daemon's filesystem grows by about that.
func TestDiskLimitEnforcedByKernel(t *testing.T) {
	r := newRig(t)
	host := os.Getenv("T1FLOW_QUOTA_DOCKER_HOST")
	if host == "" {
		t.Skip("set T1FLOW_QUOTA_DOCKER_HOST to a daemon that enforces sizes (scripts/ensure-xfs-docker.sh; unix:///run/t1flow-xfs/docker.sock)")
	}
	ctx := context.Background()
	q, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	base := r.baseTag()
	if _, _, err := q.ImageInspectWithRaw(ctx, base); err != nil {
		rc, err := r.cli.ImageSave(ctx, []string{base})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := q.ImageLoad(ctx, rc)
		rc.Close()
		if err != nil {
			t.Fatalf("load %s into %s: %v", base, host, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	plan, err := sandbox.DiskLimit(ctx, q, base, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; StorageOpt %v", plan.Why, plan.StorageOpt)
	if plan.Watch {
		t.Fatalf("the daemon at %s does not enforce sizes", host)
	}
	resp, err := q.ContainerCreate(ctx, &container.Config{Image: base, Cmd: []string{"sleep", "300"}},
		&container.HostConfig{NetworkMode: "none", StorageOpt: plan.StorageOpt, CapDrop: []string{"ALL"}}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer q.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true})
	if err := q.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	info := func() int64 {
		ins, _, err := q.ContainerInspectWithRaw(ctx, resp.ID, true)
		if err != nil || ins.SizeRw == nil {
			t.Fatalf("inspect: %v", err)
		}
		return *ins.SizeRw
	}
	start := time.Now()
	out := execOn(t, q, resp.ID, "head -c 1000000000 /dev/zero > /bomb; echo rc=$?; stat -c %s /bomb")
	took := time.Since(start)
	used := info()
	t.Logf("disk bomb: %s in %s; writable layer %d MB", strings.Join(strings.Fields(out), " "), took, used>>20)
	if !strings.Contains(out, "rc=1") || !(strings.Contains(out, "No space left") || strings.Contains(out, "quota exceeded")) {
		t.Errorf("the write did not fail at the limit: %s", out)
	}
	if used > 72<<20 {
		t.Errorf("the sandbox wrote %d MB against a 64 MB limit", used>>20)
	}
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
