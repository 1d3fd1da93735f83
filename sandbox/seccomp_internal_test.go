package sandbox

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// allowed is every syscall name a rule of p allows, under any condition.
func allowed(p *seccomp.Seccomp) map[string]bool {
	out := map[string]bool{}
	for _, r := range p.Syscalls {
		if r.Action != specs.ActAllow {
			continue
		}
		for _, n := range append(slices.Clone(r.Names), r.Name) {
			out[n] = true
		}
	}
	return out
}

// TestSandboxSeccompDeniesCrossProcess: a sandbox's HostConfig carries, with
// no-new-privileges, a seccomp profile that is Docker's default less the
// calls that reach into another process (TestSandboxDeniesPtrace plays them
// in a real sandbox).
func TestSandboxSeccompDeniesCrossProcess(t *testing.T) {
	opts := hostConfig(Limits{CPUs: 1, MemoryMB: 512, Pids: 64}).SecurityOpt
	if !slices.Contains(opts, "no-new-privileges") {
		t.Errorf("security options %.80q lack no-new-privileges", opts)
	}
	var raw string
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "seccomp="); ok {
			raw = v
		}
	}
	if raw == "" {
		t.Fatalf("no seccomp profile in the security options %.80q", opts)
	}
	var got seccomp.Seccomp
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatalf("the seccomp option is no profile: %v", err)
	}
	if got.DefaultAction != specs.ActErrno {
		t.Errorf("default action %s: a call no rule allows must fail", got.DefaultAction)
	}
	have, want := allowed(&got), allowed(seccomp.DefaultProfile())
	for _, n := range []string{"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise"} {
		if have[n] {
			t.Errorf("%s is allowed", n)
		}
	}
	// Everything else Docker's default allows, the sandbox allows.
	for n := range want {
		if !have[n] && !slices.Contains(crossProcessSyscalls, n) {
			t.Errorf("%s is allowed by Docker's default profile, not by the sandbox's", n)
		}
	}
	// Landlock's calls too: the sealed pytest confines itself with them
	// (sitecustomize), unconditionally allowed by Docker's default.
	for _, n := range []string{"read", "write", "openat", "execve", "clone", "wait4",
		"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "prctl"} {
		if !have[n] {
			t.Errorf("%s is not allowed", n)
		}
	}
}
