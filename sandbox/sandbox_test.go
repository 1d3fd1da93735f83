package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// sandboxFor builds the task's image and starts a sandbox, removed when the test ends.
func sandboxFor(t *testing.T, d *sandbox.Docker, dir string) (*task.Task, string) {
	t.Helper()
	ctx := context.Background()
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := d.EnsureTaskImage(ctx, tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := sandbox.ContainerName(testenv.HostName("unit")+"."+tk.ID, 1)
	id, err := d.Start(ctx, name, img, sandbox.TaskLimits(tk.Config), sandbox.TaskEnv(tk.Config), map[string]string{sandbox.LabelRollout: "unit-" + tk.ID, sandbox.LabelCampaign: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove(context.Background(), id) })
	// A retried creation adopts the running container instead of leaking another.
	again, err := d.Start(ctx, name, img, sandbox.TaskLimits(tk.Config), sandbox.TaskEnv(tk.Config), map[string]string{sandbox.LabelRollout: "unit-" + tk.ID, sandbox.LabelCampaign: "unit"})
	if err != nil || again != id {
		t.Fatalf("second Start: %s, %v; want the same container %s", again, err, id)
	}
	return tk, id
}

func TestSandboxIsolationAndLimits(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	tk, id := sandboxFor(t, d, "../examples/tasks/service-account-setup")
	ins, err := d.Client.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	if hc.NetworkMode != "none" {
		t.Errorf("network %q, want none", hc.NetworkMode)
	}
	if hc.Memory != tk.Config.MemoryMB<<20 || hc.PidsLimit == nil || *hc.PidsLimit != tk.Config.Pids || hc.NanoCPUs != int64(tk.Config.CPUs*1e9) {
		t.Errorf("limits: memory %d pids %v cpus %d", hc.Memory, hc.PidsLimit, hc.NanoCPUs)
	}
	// The one host path allowed in: the sealed verifier toolchain, read-only.
	if len(hc.Binds) != 0 || len(hc.Mounts) != 1 || hc.Mounts[0].Target != sandbox.ToolchainMount || !hc.Mounts[0].ReadOnly || hc.Privileged {
		t.Errorf("host paths or privilege inside the sandbox: %v %v %v", hc.Binds, hc.Mounts, hc.Privileged)
	}
	// no-new-privileges, and a seccomp profile of the sandbox's own
	// (TestSandboxDeniesPtrace tries what it takes away).
	if opts := strings.Join(hc.SecurityOpt, ","); !strings.Contains(opts, "no-new-privileges") || !strings.Contains(opts, "seccomp=") {
		t.Errorf("security opts %.200s", opts)
	}
	for _, l := range []string{sandbox.LabelRollout, sandbox.LabelCreated, sandbox.LabelCampaign} {
		if ins.Config.Labels[l] == "" {
			t.Errorf("label %s missing", l)
		}
	}
	res, err := d.Exec(ctx, id, "ls /sys/class/net; test -e /var/run/docker.sock && echo SOCKET; useradd probe && chown probe /tmp && echo ADMIN-OK", sandbox.ExecOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(strings.Split(res.Output, "\n")[0]) != "lo" || strings.Contains(res.Output, "SOCKET") || !strings.Contains(res.Output, "ADMIN-OK") {
		t.Errorf("inside the sandbox: %q", res.Output)
	}
	// Capabilities that tasks do not need are gone.
	res, _ = d.Exec(ctx, id, "mount -t tmpfs x /mnt 2>&1; echo rc=$?", sandbox.ExecOptions{Timeout: 30 * time.Second})
	if strings.Contains(res.Output, "rc=0") {
		t.Errorf("mount worked inside the sandbox: %q", res.Output)
	}
}

func TestExecCapsOutputAndTimesOut(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	_, id := sandboxFor(t, d, "../examples/tasks/log-level-counter")
	res, err := d.Exec(ctx, id, "echo START; head -c 200000 /dev/zero | tr '\\0' a; echo; echo END; exit 3", sandbox.ExecOptions{Timeout: 30 * time.Second, HeadCap: 100, TailCap: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || !strings.HasPrefix(res.Output, "START") || !strings.HasSuffix(strings.TrimSpace(res.Output), "END") {
		t.Fatalf("exit %d, output %q", res.ExitCode, res.Output)
	}
	if res.Bytes < 200000 || res.Dropped != res.Bytes-200 {
		t.Fatalf("bytes %d dropped %d", res.Bytes, res.Dropped)
	}
	start := time.Now()
	res, err = d.Exec(ctx, id, "sleep 60 & sleep 60; echo never", sandbox.ExecOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || strings.Contains(res.Output, "never") || time.Since(start) > 20*time.Second {
		t.Fatalf("timeout not enforced: %+v after %s", res, time.Since(start))
	}
	ps, _ := d.Exec(ctx, id, "ps -eo args | grep -c '^sleep 60' || true", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if strings.TrimSpace(ps.Output) != "0" {
		t.Fatalf("the timed-out command's process group survived: %q", ps.Output)
	}
}

func TestCopyInOutAndDestroy(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	tk, id := sandboxFor(t, d, "../examples/tasks/csv-revenue-report")
	b, err := task.TarBytes(tk.Dir, "tests", "probe/")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyIn(ctx, id, "/", b); err != nil {
		t.Fatal(err)
	}
	res, _ := d.Exec(ctx, id, "test -x /probe/test.sh && wc -c < /probe/test_outputs.py", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if res.ExitCode != 0 {
		t.Fatalf("copied files missing or not executable: %q", res.Output)
	}
	out, err := d.CopyOut(ctx, id, "/app/sales.csv")
	if err != nil || !strings.Contains(string(out), "region,product") {
		t.Fatalf("copy out: %v", err)
	}
	if err := d.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(ctx, id); err != nil {
		t.Fatalf("removing a removed sandbox must succeed: %v", err)
	}
	_, err = d.Exec(ctx, id, "true", sandbox.ExecOptions{Timeout: 10 * time.Second})
	if !errors.Is(err, sandbox.ErrContainerGone) {
		t.Fatalf("exec in a removed sandbox: %v, want ErrContainerGone", err)
	}
}

// TestDeploymentsDoNotShareSandboxes: two deployments (two Temporals) on one
// daemon run the same rollout ID. Their names differ, so each gets its own
// container; and a container of the name that belongs to another
// deployment is neither adopted (two agents in one sandbox) nor removed.
func TestDeploymentsDoNotShareSandboxes(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	tk, err := task.Load("../examples/tasks/csv-revenue-report")
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := d.EnsureTaskImage(ctx, tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	rollout := testenv.HostName("deploy") + ".same-rollout"
	start := func(name, deployment string) (string, error) {
		return d.Start(ctx, name, img, sandbox.TaskLimits(tk.Config), nil,
			map[string]string{sandbox.LabelRollout: rollout, sandbox.LabelDeployment: deployment})
	}
	a, b := "127.0.0.1:7233/default", "127.0.0.1:7234/default"
	na, nb := sandbox.ContainerNameIn(a, rollout, 1), sandbox.ContainerNameIn(b, rollout, 1)
	if na == nb || na == sandbox.ContainerName(rollout, 1) {
		t.Fatalf("names %s and %s (unnamed: %s)", na, nb, sandbox.ContainerName(rollout, 1))
	}
	ida, err := start(na, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove(context.Background(), ida) })
	idb, err := start(nb, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove(context.Background(), idb) })
	if ida == idb {
		t.Fatal("one container for two deployments")
	}
	// The name taken by another deployment's container (a hash collision, or
	// a name made by hand): refused, and that container left running.
	if got, err := start(na, b); err == nil || !strings.Contains(err.Error(), "taken by a container of deployment") {
		t.Fatalf("Start of another deployment's name: %s, %v", got, err)
	}
	ins, err := d.Client.ContainerInspect(ctx, ida)
	if err != nil || !ins.State.Running {
		t.Fatalf("deployment a's sandbox after b's try: %v %+v", err, ins.State)
	}
	if !sandbox.OtherDeployment(ins.Config.Labels, b) || sandbox.OtherDeployment(ins.Config.Labels, a) || sandbox.OtherDeployment(map[string]string{}, b) {
		t.Error("OtherDeployment")
	}
}
