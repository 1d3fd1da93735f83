package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// ptraceProbe is what a process the agent's solution leaves running would
// do to test.sh's bash (or any dumpable verifier process of its uid) while
// the tests run: trace it, read and write its memory, take its descriptors.
// It prints one "way=result" line per way, result OK or the errno's name.
// /proc/<pid>/mem is reported, not judged: seccomp cannot filter it (an
// open and a pread, no ptrace call), see docs/verification.md.
const ptraceProbe = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *way, int ok) {
	const char *e = errno == EPERM ? "EPERM" : errno == EACCES ? "EACCES" : errno == ENOSYS ? "ENOSYS" : "other";
	if (ok) printf("%s=OK\n", way); else printf("%s=%s (errno %d)\n", way, e, errno);
}

int main(int argc, char **argv) {
	pid_t pid = atoi(argv[1]);
	char path[64], line[512];
	unsigned long lo = 0, hi;
	char perm[5];
	snprintf(path, sizeof path, "/proc/%d/maps", pid);
	FILE *m = fopen(path, "r");
	while (m && fgets(line, sizeof line, m))
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perm) == 3 && strcmp(perm, "rw-p") == 0) break;
	if (!lo) { printf("no writable mapping in %s\n", path); return 2; }
	char buf[16];
	struct iovec local = {buf, sizeof buf}, remote = {(void *)lo, sizeof buf};
	errno = 0;
	say("process_vm_readv", process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof buf);
	errno = 0; // the same bytes back: the target runs on unharmed
	say("process_vm_writev", process_vm_writev(pid, &local, 1, &remote, 1, 0) == sizeof buf);
	errno = 0;
	int ok = ptrace(PTRACE_SEIZE, pid, 0, 0) == 0;
	if (ok) {
		ok = ptrace(PTRACE_INTERRUPT, pid, 0, 0) == 0 && waitpid(pid, 0, __WALL) == pid;
		errno = 0;
		ptrace(PTRACE_PEEKDATA, pid, (void *)lo, 0);
		ok = ok && errno == 0;
		ptrace(PTRACE_DETACH, pid, 0, 0);
	}
	say("ptrace", ok);
	int pfd = syscall(434 /* pidfd_open */, pid, 0);
	errno = 0;
	say("pidfd_getfd", pfd >= 0 && syscall(438 /* pidfd_getfd */, pfd, 1, 0) >= 0);
	snprintf(path, sizeof path, "/proc/%d/mem", pid);
	int fd = open(path, O_RDWR);
	say("proc_mem", fd >= 0 && pread(fd, buf, sizeof buf, lo) == sizeof buf && pwrite(fd, buf, sizeof buf, lo) == sizeof buf);
	return 0;
}
`

// TestSandboxDeniesPtrace: a process of the agent's, root like the agent,
// attaches to another process of the same uid in the sandbox (a bash, as
// test.sh runs under) and reads and writes its memory. Under Docker's
// default seccomp profile ptrace worked, and process_vm_readv/writev too
// from Docker 23 (pidfd_getfd needs CAP_SYS_PTRACE there); the sandbox's
// profile (sandbox/seccomp.go) must refuse each with EPERM, in the sandbox
// and in the live verifier made from its snapshot.
func TestSandboxDeniesPtrace(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	d := testenv.Docker(t)
	sb := testenv.StartTaskSandbox(t, d, filepath.Join(testenv.RepoRoot(), "examples/tasks/log-level-counter"), "ptrace")
	ctx := context.Background()
	if err := d.CopyIn(ctx, sb.ID, "/", buildProbe(t, ptraceProbe)); err != nil {
		t.Fatal(err)
	}
	deniedIn(t, d, sb.ID, "the sandbox")

	thaw, err := d.FreezeForVerifier(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := d.Client.ContainerInspect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := d.StartLiveVerifier(ctx, ins, thaw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.RemoveLiveVerifier(context.Background(), sb.ID) })
	deniedIn(t, d, lv.ID, "the live verifier")
}

// deniedIn runs the probe in container id against a bash of its own uid
// that is not its child, and fails for each way that is not refused.
func deniedIn(t *testing.T, d *sandbox.Docker, id, where string) {
	t.Helper()
	res, err := d.Exec(context.Background(), id, `bash -c 'sleep 60; :' </dev/null >/dev/null 2>&1 &
sleep 0.3; /ptrace-probe/probe $!; rc=$?; kill $!; exit $rc`, sandbox.ExecOptions{Timeout: time.Minute, User: "root"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: probe: exit %d, %v: %s", where, res.ExitCode, err, res.Output)
	}
	t.Logf("%s:\n%s", where, res.Output)
	if strings.Contains(res.Output, "proc_mem=OK") {
		t.Logf("%s: /proc/<pid>/mem of a dumpable process of the same uid is still open (no syscall seccomp can refuse)", where)
	}
	for _, way := range []string{"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"} {
		if !strings.Contains(res.Output, way+"=EPERM") && !strings.Contains(res.Output, way+"=EACCES") {
			t.Errorf("%s: %s of another process of the same uid was not refused", where, way)
		}
	}
}

// buildProbe compiles src statically on the host (scripts/ensure-sandbox-host.sh
// installs gcc) and returns a tar of it as /ptrace-probe/probe.
func buildProbe(t *testing.T, src string) []byte {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("no gcc on the host to build the probe (Debian: apt-get install gcc): %v", err)
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "probe.c"), []byte(src), 0o644)
	if out, err := exec.Command(gcc, "-static", "-O2", "-s", "-o", filepath.Join(dir, "bin", "probe"), filepath.Join(dir, "probe.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	b, err := task.TarBytes(dir, "bin", "ptrace-probe/")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
