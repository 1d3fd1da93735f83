package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
)

// sandboxFor builds the task's image and starts a sandbox, removed when the test ends.
func sandboxFor(t *testing.T, d *activities.Docker, dir string) (*task.Task, string) {
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
	name := activities.ContainerName(testenv.HostName("unit")+"."+tk.ID, 1)
	id, err := d.StartSandbox(ctx, name, img, tk, map[string]string{activities.LabelRollout: "unit-" + tk.ID, activities.LabelCampaign: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove(context.Background(), id) })
	// A retried creation adopts the running container instead of leaking another.
	again, err := d.StartSandbox(ctx, name, img, tk, map[string]string{activities.LabelRollout: "unit-" + tk.ID, activities.LabelCampaign: "unit"})
	if err != nil || again != id {
		t.Fatalf("second StartSandbox: %s, %v; want the same container %s", again, err, id)
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
	if len(hc.Binds) != 0 || len(hc.Mounts) != 0 || hc.Privileged {
		t.Errorf("host paths or privilege inside the sandbox: %v %v %v", hc.Binds, hc.Mounts, hc.Privileged)
	}
	if !strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges") {
		t.Errorf("security opts %v", hc.SecurityOpt)
	}
	for _, l := range []string{activities.LabelRollout, activities.LabelCreated, activities.LabelCampaign} {
		if ins.Config.Labels[l] == "" {
			t.Errorf("label %s missing", l)
		}
	}
	res, err := d.Exec(ctx, id, "ls /sys/class/net; test -e /var/run/docker.sock && echo SOCKET; useradd probe && chown probe /tmp && echo ADMIN-OK", activities.ExecOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(strings.Split(res.Output, "\n")[0]) != "lo" || strings.Contains(res.Output, "SOCKET") || !strings.Contains(res.Output, "ADMIN-OK") {
		t.Errorf("inside the sandbox: %q", res.Output)
	}
	// Capabilities that tasks do not need are gone.
	res, _ = d.Exec(ctx, id, "mount -t tmpfs x /mnt 2>&1; echo rc=$?", activities.ExecOptions{Timeout: 30 * time.Second})
	if strings.Contains(res.Output, "rc=0") {
		t.Errorf("mount worked inside the sandbox: %q", res.Output)
	}
}

func TestExecCapsOutputAndTimesOut(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	_, id := sandboxFor(t, d, "../examples/tasks/log-level-counter")
	res, err := d.Exec(ctx, id, "echo START; head -c 200000 /dev/zero | tr '\\0' a; echo; echo END; exit 3", activities.ExecOptions{Timeout: 30 * time.Second, HeadCap: 100, TailCap: 100})
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
	res, err = d.Exec(ctx, id, "sleep 60 & sleep 60; echo never", activities.ExecOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || strings.Contains(res.Output, "never") || time.Since(start) > 20*time.Second {
		t.Fatalf("timeout not enforced: %+v after %s", res, time.Since(start))
	}
	ps, _ := d.Exec(ctx, id, "ps -eo args | grep -c '^sleep 60' || true", activities.ExecOptions{Timeout: 10 * time.Second})
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
	res, _ := d.Exec(ctx, id, "test -x /probe/test.sh && wc -c < /probe/test_outputs.py", activities.ExecOptions{Timeout: 10 * time.Second})
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
	_, err = d.Exec(ctx, id, "true", activities.ExecOptions{Timeout: 10 * time.Second})
	if !errors.Is(err, activities.ErrContainerGone) {
		t.Fatalf("exec in a removed sandbox: %v, want ErrContainerGone", err)
	}
}

func TestVerifyIgnoresPlantedResults(t *testing.T) {
	d := testenv.Docker(t)
	ctx := context.Background()
	st, _ := store.NewLocal(t.TempDir())
	tk, id := sandboxFor(t, d, "../examples/tasks/csv-revenue-report")
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	a := &activities.Activities{Docker: d, Store: st, TaskCache: t.TempDir()}
	plant := `mkdir -p /logs/verifier /tests; echo 1 > /logs/verifier/reward.txt
echo '{"results":{"tests":[{"name":"x","status":"passed"}]}}' > /logs/verifier/ctrf.json
printf 'def test_x():\n    pass\n' > /tests/test_outputs.py; echo 'exit 0' > /tests/test.sh
nohup bash -c 'while :; do echo "{\"results\":{\"tests\":[{\"name\":\"x\",\"status\":\"passed\"}]}}" > /logs/verifier/ctrf.json 2>/dev/null; sleep 0.01; done' >/dev/null 2>&1 &
echo planted`
	if res, err := d.Exec(ctx, id, plant, activities.ExecOptions{Timeout: 10 * time.Second}); err != nil || !strings.Contains(res.Output, "planted") {
		t.Fatalf("plant: %v %q", err, res.Output)
	}
	vr, err := a.Verify(ctx, activities.VerifyInput{Sandbox: activities.Sandbox{ContainerID: id, Name: "x"}, Task: ref, TimeoutSec: 60})
	if err != nil {
		t.Fatal(err)
	}
	if vr.Format != "junit" || vr.Passed != 0 || vr.Total != 5 {
		t.Fatalf("planted results leaked into the verdict: %+v", vr)
	}
}
