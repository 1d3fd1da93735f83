package sandbox_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// The sandbox's PID 1 (the keepalive) must run nothing of the container's
// after it starts: root in the sandbox can replace any of its files, and
// whatever PID 1 starts survives every kill -9 -1 of the verifier. These
// tests plant wrappers around the container's commands that leave a mark
// when PID 1 (or a child of it) runs them, stop every process the way the
// verifier does, and look for the mark and for survivors.

// keepalivePlant wraps the container's sleep, bash, sh, env and setpriv (the
// commands a keepalive could run) in a script that marks /pid1-ran when it
// runs as PID 1 or as a child of PID 1, and then runs the real command.
const keepalivePlant = `set -e
for c in sleep bash sh env setpriv; do
  p=$(command -v $c) || continue
  p=$(readlink -f "$p")
  [ -e "$p.t1real" ] && continue
  cp "$p" "$p.t1real"
done
b=$(readlink -f "$(command -v bash)").t1real
for c in sleep bash sh env setpriv; do
  p=$(command -v $c) || continue
  p=$(readlink -f "$p")
  printf '#!%s\n{ [ "$$" = 1 ] || [ "$PPID" = 1 ]; } && echo "%s $*" >> /pid1-ran\nexec -a "$0" %s "$@"\n' "$b" "$c" "$p.t1real" > "$p.t1new"
  chmod 755 "$p.t1new"
  mv "$p.t1new" "$p"
done
echo planted`

// tcArgv runs script with the toolchain's bash, nothing of the container's
// (its bash is the agent's wrapper once planted).
func tcArgv(script string) []string {
	m := sandbox.ToolchainMount
	return []string{m + "/bin/env", "-i", "PATH=" + m + "/bin", m + "/bin/bash", "--norc", "--noprofile", "-c", script, "t1flow-test"}
}

// keepaliveSurvivors lists (as "pid comm") every process but PID 1 and the
// lister itself, with builtins only.
const keepaliveSurvivors = `for p in /proc/[0-9]*; do
  n=${p#/proc/}
  [ "$n" = 1 ] || [ "$n" = "$$" ] || { read -r c < "$p/comm" && echo "survivor $n $c"; } 2>/dev/null
done; true`

type keepaliveRig struct {
	t   *testing.T
	d   *sandbox.Docker
	img string
}

func newKeepaliveRig(t *testing.T) *keepaliveRig {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	d := testenv.Docker(t)
	tk, err := task.Load(filepath.Join(testenv.RepoRoot(), "examples/tb2/word-frequency"))
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := d.EnsureTaskImage(context.Background(), tk, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &keepaliveRig{t: t, d: d, img: img}
}

// withEntrypoint is img with an ENTRYPOINT that marks /entrypoint-ran and
// then runs its arguments (the common docker-entrypoint.sh shape).
func (r *keepaliveRig) withEntrypoint() string {
	r.t.Helper()
	ctx := context.Background()
	c, err := r.d.Client.ContainerCreate(ctx, &container.Config{Image: r.img, Cmd: []string{"true"}}, nil, nil, nil, "")
	if err != nil {
		r.t.Fatal(err)
	}
	defer r.d.Client.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	ref := "t1flow-keepalive-test:" + strings.ToLower(strings.ReplaceAll(r.t.Name(), "/", "-"))
	if _, err := r.d.Client.ContainerCommit(ctx, c.ID, container.CommitOptions{
		Reference: ref,
		Changes:   []string{`ENTRYPOINT ["/bin/sh", "-c", "echo ran >> /entrypoint-ran; exec \"$@\"", "entrypoint"]`},
	}); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { r.d.Client.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true}) })
	return ref
}

func (r *keepaliveRig) start(d *sandbox.Docker, img string) string {
	r.t.Helper()
	rollout := testenv.HostName("keepalive") + "." + strings.ReplaceAll(r.t.Name(), "/", ".")
	id, err := d.Start(context.Background(), sandbox.ContainerName(rollout, 1), img,
		sandbox.Limits{CPUs: 1, MemoryMB: 512, Pids: 256, WorkDir: "/app"}, nil,
		map[string]string{sandbox.LabelRollout: rollout, sandbox.LabelCampaign: "unit"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { d.Remove(context.Background(), id) })
	return id
}

// sh runs script in container id with the container's own bash, as root
// (the agent's shell).
func (r *keepaliveRig) sh(id, script string) string {
	r.t.Helper()
	res, err := r.d.Exec(context.Background(), id, script, sandbox.ExecOptions{Timeout: time.Minute, User: "root"})
	if err != nil || res.ExitCode != 0 {
		r.t.Fatalf("%s: exit %d, %v: %s", script, res.ExitCode, err, res.Output)
	}
	return res.Output
}

// tc runs script with the toolchain's bash in container id, as root.
func (r *keepaliveRig) tc(id, script string) string {
	r.t.Helper()
	res, err := r.d.ExecArgv(context.Background(), id, tcArgv(script), sandbox.ExecOptions{Timeout: time.Minute, User: "root", Env: sandbox.ToolchainExecEnv})
	if err != nil || res.ExitCode != 0 {
		r.t.Fatalf("%s: exit %d, %v: %s", script, res.ExitCode, err, res.Output)
	}
	return res.Output
}

// killAll is the verifier's kill (ToolchainKillCmd), then the survivors a
// moment later: there must be none, and no mark of PID 1 having run the
// container's commands.
func (r *keepaliveRig) killAll(id string) {
	r.t.Helper()
	res, err := r.d.ExecArgv(context.Background(), id, sandbox.ToolchainKillCmd(), sandbox.ExecOptions{Timeout: time.Minute, User: "root", Env: sandbox.ToolchainExecEnv})
	if err != nil || res.ExitCode != 0 {
		r.t.Fatalf("kill: exit %d, %v: %s", res.ExitCode, err, res.Output)
	}
	time.Sleep(time.Second)
	if out := r.tc(id, keepaliveSurvivors); strings.Contains(out, "survivor") {
		r.t.Errorf("processes survived the verifier's kill -9 -1 (started again by PID 1?):\n%s", out)
	}
	r.noMark(id)
}

func (r *keepaliveRig) noMark(id string) {
	r.t.Helper()
	if out := r.tc(id, `for f in /pid1-ran /entrypoint-ran; do [ -e $f ] && { echo "$f:"; cat $f; }; done; true`); strings.TrimSpace(out) != "" {
		r.t.Errorf("PID 1 ran the container's files:\n%s", out)
	}
}

// pid1Sealed checks PID 1 is the toolchain's bash, and that root in the
// container, under any UIDs it may take, can neither write PID 1's memory
// nor open its descriptors (and so rewrite what it runs).
func (r *keepaliveRig) pid1Sealed(id string) {
	r.t.Helper()
	out := r.tc(id, `read -r -d '' exe < /proc/1/cmdline; echo "exe=$exe"
while read -r k v; do [ "$k" = Uid: ] && echo "uids=$v"; done < /proc/1/status
try() { ( exec 5<>/proc/1/mem ) 2>/dev/null && echo "$1: /proc/1/mem opened"
  ( exec 5>/proc/1/fd/3 ) 2>/dev/null && echo "$1: /proc/1/fd/3 opened"
  ( exec 5</proc/1/environ ) 2>/dev/null && echo "$1: /proc/1/environ opened"; }
try root
for u in "--reuid=65534 --regid=65534" "--ruid=65534" "--euid=65534"; do
  setpriv $u --clear-groups -- bash --norc --noprofile -p -c "$(declare -f try); try '$u'"
done; true`)
	if !strings.Contains(out, "exe="+sandbox.ToolchainMount+"/bin/bash\n") {
		r.t.Errorf("PID 1 is not the toolchain's bash:\n%s", out)
	}
	if strings.Contains(out, "opened") {
		r.t.Errorf("root in the sandbox can reach into PID 1:\n%s", out)
	}
}

// orphansReaped: PID 1 still reaps what dies reparented to it.
func (r *keepaliveRig) orphansReaped(id string) {
	r.t.Helper()
	r.sh(id, `for i in 1 2 3; do setsid bash -c 'sleep 0.2 & sleep 0.3 & exit 0' & done; wait`)
	time.Sleep(time.Second)
	if out := r.tc(id, `for p in /proc/[0-9]*; do while read -r k v; do [ "$k" = State: ] && [ "${v%% *}" = Z ] && echo "zombie ${p#/proc/}"; done < $p/status; done 2>/dev/null; true`); strings.Contains(out, "zombie") {
		r.t.Errorf("PID 1 left zombies:\n%s", out)
	}
}

// TestKeepaliveRunsNothingOfTheContainers: a sandbox of an image with an
// ENTRYPOINT; the agent replaces every command a keepalive could run and
// leaves a process; the verifier's kill leaves only PID 1, which ran none
// of the container's files, and stays sealed; the live verifier made from
// the agent's snapshot does the same.
func TestKeepaliveRunsNothingOfTheContainers(t *testing.T) {
	r := newKeepaliveRig(t)
	id := r.start(r.d, r.withEntrypoint())
	r.noMark(id) // the ENTRYPOINT did not run
	r.pid1Sealed(id)
	r.orphansReaped(id)
	// A process of the agent's left running (started before the plant: the
	// wrappers would take its reparenting to PID 1 for PID 1's doing).
	r.sh(id, `setsid nohup sleep 1234 >/dev/null 2>&1 </dev/null & echo started`)
	r.sh(id, keepalivePlant)
	for range 2 { // the survey's kill, then ToolchainRunCmd's
		r.killAll(id)
	}
	if ins, err := r.d.Client.ContainerInspect(context.Background(), id); err != nil || !ins.State.Running {
		t.Fatalf("the sandbox stopped with its processes: %v", err)
	}

	// The live verifier: the snapshot's bash, sleep and ENTRYPOINT are the
	// agent's.
	ctx := context.Background()
	thaw, err := r.d.FreezeForVerifier(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := r.d.Client.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := r.d.StartLiveVerifier(ctx, ins, thaw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.d.RemoveLiveVerifier(context.Background(), id) })
	time.Sleep(500 * time.Millisecond)
	r.noMark(lv.ID)
	r.pid1Sealed(lv.ID)
	r.killAll(lv.ID)
}

// TestKeepaliveWithoutToolchain: a Docker that never ran EnsureToolchain
// (its sandboxes cannot be verified sealed) starts the image's bash once, and
// PID 1 runs nothing after: a replaced sleep is never started again.
func TestKeepaliveWithoutToolchain(t *testing.T) {
	r := newKeepaliveRig(t)
	bare, err := sandbox.NewDocker(context.Background(), testenv.StateDir())
	if err != nil {
		t.Fatal(err)
	}
	id := r.start(bare, r.img)
	ins, err := bare.Client.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if sandbox.HasToolchain(ins.Mounts) {
		t.Fatal("a toolchain was mounted by a Docker without one")
	}
	// A process of the agent's left running (started before the plant: the
	// wrappers would take its reparenting to PID 1 for PID 1's doing).
	r.sh(id, `setsid nohup sleep 1234 >/dev/null 2>&1 </dev/null & echo started`)
	r.sh(id, keepalivePlant)
	// The container's bash, exec'd directly: no timeout for kill -9 -1 to
	// kill under it.
	raw := func(script string) string {
		res, err := bare.ExecArgv(context.Background(), id, []string{"bash", "-c", script}, sandbox.ExecOptions{Timeout: time.Minute, User: "root"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: exit %d, %v: %s", script, res.ExitCode, err, res.Output)
		}
		return res.Output
	}
	raw(`kill -9 -1 2>/dev/null; exit 0`)
	time.Sleep(time.Second)
	out := raw(keepaliveSurvivors + `
for f in /pid1-ran /entrypoint-ran; do [ -e $f ] && { echo "$f:"; cat $f; }; done; true`)
	if strings.Contains(out, "survivor") || strings.Contains(out, "-ran:") {
		t.Errorf("PID 1 ran the container's commands after kill -9 -1:\n%s", out)
	}
	if ins, err := bare.Client.ContainerInspect(context.Background(), id); err != nil || !ins.State.Running {
		t.Fatalf("the sandbox stopped with its processes: %v", err)
	}
}
