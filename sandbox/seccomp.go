package sandbox

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
)

// crossProcessSyscalls reach into another process: trace it (ptrace), read
// or write its memory (process_vm_readv/writev), take a copy of one of its
// descriptors (pidfd_getfd), compare its descriptors and memory with one's
// own (kcmp), or advise the kernel on its memory (process_madvise).
//
// Docker's default seccomp profile allows ptrace to every container on
// kernels from 4.8, and process_vm_readv/writev too since Docker 23 (moby
// #42083): a process the solution left running, of the same uid as
// test.sh's bash or another dumpable verifier process, could attach to it
// and change what it runs or reports. The other three need CAP_SYS_PTRACE
// there, which a sandbox never has; they go anyway, so that no capability
// brings them back. No task here needs them (gdb, strace and
// LeakSanitizer's leak check would: no example or audit task runs one).
// What seccomp cannot refuse: /proc/<pid>/mem of a dumpable process of the
// same uid (an open and a read or write). The sealed pytest closes that to
// itself and what it starts with a Landlock domain (sitecustomize), whose
// calls (landlock_*) the profile allows as Docker's does (docs/verification.md).
var crossProcessSyscalls = []string{
	"kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace",
}

// sandboxSeccomp is Docker's default seccomp profile (github.com/moby/profiles,
// the profile Docker itself builds in) with crossProcessSyscalls taken out of
// every rule: the profile's default action then refuses them with EPERM.
func sandboxSeccomp() *seccomp.Seccomp {
	p := seccomp.DefaultProfile()
	rules := p.Syscalls[:0]
	for _, r := range p.Syscalls {
		r.Names = slices.DeleteFunc(r.Names, func(n string) bool { return slices.Contains(crossProcessSyscalls, n) })
		if slices.Contains(crossProcessSyscalls, r.Name) {
			r.Name = ""
		}
		if len(r.Names) > 0 || r.Name != "" {
			rules = append(rules, r)
		}
	}
	p.Syscalls = rules
	return p
}

// SecurityOpt is the security options of every sandbox and live verifier
// (and of tests' containers that stand for one): no-new-privileges, and
// sandboxSeccomp inline (as `docker run --security-opt seccomp=profile.json`
// sends it).
func SecurityOpt() []string {
	return []string{"no-new-privileges", seccompOpt()}
}

// seccompOpt is sandboxSeccomp as a security option, marshalled once.
var seccompOpt = sync.OnceValue(func() string {
	b, err := json.Marshal(sandboxSeccomp())
	if err != nil {
		panic("sandbox: marshal the seccomp profile: " + err.Error()) // plain data: cannot fail
	}
	return "seccomp=" + string(b)
})
