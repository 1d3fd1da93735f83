package activities_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// channelRig is one sandbox of examples/tb2/inventory-module, made as a
// rollout makes it, with the oracle's solution in /app and extra appended
// to it (code of the agent's that runs inside the sealed pytest, whenever
// a test loads the module).
func channelRig(t *testing.T, extra string) (*sandbox.Docker, *activities.Activities, task.Ref, string) {
	d := testenv.Docker(t)
	ctx := context.Background()
	sb := testenv.StartTaskSandbox(t, d, filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module"), "channel")
	tk, st, ref, id := sb.Task, sb.Store, sb.Ref, sb.ID
	sol, err := task.TarBytes(tk.Dir, "solution", "solution/")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyIn(ctx, id, "/", sol); err != nil {
		t.Fatal(err)
	}
	script := "set -e; bash /solution/solve.sh; rm -rf /solution\ncat >> /app/inventory.py <<'PY'\n" + extra + "\nPY\n"
	res, err := d.Exec(ctx, id, script, sandbox.ExecOptions{Timeout: 2 * time.Minute, User: "root", WorkDir: "/app"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("agent: exit %d, %v: %s", res.ExitCode, err, res.Output)
	}
	return d, &activities.Activities{Docker: d, Store: st, TaskCache: t.TempDir()}, ref, id
}

func verifyWithChannel(t *testing.T, a *activities.Activities, ref task.Ref, id string) (activities.VerifyResult, sandbox.RunnerChannel) {
	t.Helper()
	var ch sandbox.RunnerChannel
	activities.SetChannelSeen(func(c sandbox.RunnerChannel) { ch = c })
	defer activities.SetChannelSeen(nil)
	vr, err := a.Verify(context.Background(), activities.VerifyInput{
		Sandbox: activities.Sandbox{ContainerID: id, Name: t.Name()}, Task: ref, RolloutID: "channel",
	})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	t.Logf("%d/%d passed, resolved %v, tampered %v; channel: %d sources, %d sessions, exit %v, unauthenticated %v",
		vr.Passed, vr.Total, vr.Resolved, vr.Tampered, ch.Sources, ch.Sessions, ch.ExitStatuses, ch.Unauthenticated)
	return vr, ch
}

// probeOnce starts, the first time a test loads the module, a detached
// shell of the agent's (a subprocess: nothing the guard reports) given
// pytest's pid.
const probeOnce = `import os as _os, subprocess as _sp
if not _os.path.exists("/tmp/.probe-started"):
    open("/tmp/.probe-started", "w").close()
    _sp.Popen(["bash", "/app/.probe.sh", str(_os.getpid())], start_new_session=True,
              stdin=_sp.DEVNULL, stdout=_sp.DEVNULL, stderr=_sp.DEVNULL)
`

// TestVerifyChannelAuthenticatedRunner: the oracle's run reports over an
// authenticated channel (a source per runner process, nothing forged, no
// evidence), and the sealed pytest is not dumpable: a process of the
// agent's, root like it but without CAP_SYS_PTRACE, can list its
// descriptors but neither open nor read one, nor its environment, through
// /proc; test.sh's shell's descriptor 61 is the relay's socket, which /proc
// does not open again (sandbox.ToolchainRelay). Code inside pytest still
// holds the channel; a runner's line it writes there without the runner's
// key is forged, and the rollout tampered.
func TestVerifyChannelAuthenticatedRunner(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	t.Run("oracle", func(t *testing.T) {
		_, a, ref, id := channelRig(t, "")
		vr, ch := verifyWithChannel(t, a, ref, id)
		if !vr.Resolved || vr.Passed != 5 || vr.Total != 5 || len(vr.Tampered) != 0 {
			t.Fatalf("the oracle: %d/%d, resolved %v, tampered %v", vr.Passed, vr.Total, vr.Resolved, vr.Tampered)
		}
		if ch.Sources < 1 || ch.Unauthenticated || ch.Sessions != 1 || len(ch.Evidence) != 0 {
			t.Fatalf("the oracle's channel: %+v", ch)
		}
	})
	t.Run("proc", func(t *testing.T) {
		d, a, ref, id := channelRig(t, probeOnce)
		_, err := d.Exec(context.Background(), id, `cat > /app/.probe.sh <<'SH'
p=$1; out=/tmp/.probe; n=0; opened=0
for f in /proc/$p/fd/*; do
  n=$((n+1))
  if readlink $f >/dev/null 2>&1 || (exec 9>>$f) 2>/dev/null; then opened=$((opened+1)); fi
done
[ $n -gt 2 ] && [ $opened = 0 ] && echo "fd denied" >> $out || echo "fd open ($opened of $n)" >> $out
cat /proc/$p/environ >/dev/null 2>&1 && echo "environ open" >> $out || echo "environ denied" >> $out
for q in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $q/cmdline 2>/dev/null) || continue
  case $c in "/.t1flow-verifier/bin/bash --norc --noprofile -c "*" /tests/test.sh"*) b=${q#/proc/};; esac
done
[ -n "$b" ] && ! (exec 9>/proc/$b/fd/61) 2>/dev/null && echo "test.sh-fd-61 denied" >> $out || echo "test.sh-fd-61 open" >> $out
SH`, sandbox.ExecOptions{Timeout: time.Minute, User: "root"})
		if err != nil {
			t.Fatal(err)
		}
		vr, ch := verifyWithChannel(t, a, ref, id)
		if !vr.Resolved || len(vr.Tampered) != 0 || ch.Sources < 1 {
			t.Fatalf("a probe that writes nothing: %d/%d, resolved %v, tampered %v", vr.Passed, vr.Total, vr.Resolved, vr.Tampered)
		}
		res, err := d.Exec(context.Background(), id, "cat /tmp/.probe", sandbox.ExecOptions{Timeout: time.Minute, User: "root"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(res.Output); strings.Join(got, " ") != "fd denied environ denied test.sh-fd-61 denied" {
			t.Fatalf("the agent's process on the sealed pytest's /proc: %q", res.Output)
		}
	})
	t.Run("forged", func(t *testing.T) {
		_, a, ref, id := channelRig(t, `import os as _os, sys as _sys
if not _os.path.exists("/tmp/.forged"):
    open("/tmp/.forged", "w").close()
    _os.write(_sys.t1flow_channel, b'{"ev":"session-start","pid":1}\n{"ev":"session-finish","pid":1,"exitstatus":0}\n')
`)
		vr, _ := verifyWithChannel(t, a, ref, id)
		if len(vr.Tampered) == 0 || vr.Tampered[0].Kind != "forged" {
			t.Fatalf("runner lines forged from inside pytest: tampered %v", vr.Tampered)
		}
	})
}
