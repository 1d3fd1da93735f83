package sandbox_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// TestOracleInstallsAreNotTampering runs the oracles of examples/installs,
// which apt-get install ordinary Debian packages that add NSS modules
// (libnss_systemd.so.2; libc6-dev's libnss_compat.so and libnss_hesiod.so)
// and edit /etc/nsswitch.conf, and checks the tamper check finds nothing and
// the tests pass sealed. Then it overwrites the installed module with
// another library: the same path, owned by the same package, is flagged,
// because it is no longer what the package ships.
func TestOracleInstallsAreNotTampering(t *testing.T) {
	r := newRig(t)
	dirs, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "examples/installs/*"))
	if len(dirs) < 2 {
		t.Fatalf("only %d install tasks", len(dirs))
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			r.t = t
			id := r.sandboxOn(r.image(dir, r.baseTag()), "bridge")
			r.copyDir(id, filepath.Join(dir, "solution"), "/solution")
			if code, out := r.exec(id, []string{"bash", "/solution/solve.sh"}, nil, ""); code != 0 {
				t.Fatalf("solve.sh: %d %s", code, out)
			}
			_, nss := r.exec(id, []string{"bash", "-c", "ls /usr/lib/x86_64-linux-gnu/libnss_* && grep -E '^(passwd|group):' /etc/nsswitch.conf"}, nil, "/")
			t.Logf("after the install:\n%s", nss)
			if f := r.tamper(id); len(f) != 0 {
				t.Fatalf("tamper check on an oracle that installs packages: %v", f)
			}
			// The package check is what keeps the oracle clean: without it
			// (no DebCache) every added module is flagged, as in the first round.
			ins, _ := r.cli.ContainerInspect(context.Background(), id)
			if f, err := sandbox.TamperCheck(context.Background(), r.cli, ins, nil); err != nil || len(f) == 0 {
				t.Errorf("without the package check the installed modules should be flagged (else this shows nothing): %v %v", f, err)
			}
			v := r.verify(id, dir)
			vr, err := r.results(id)
			if err != nil || vr.Total < 2 || vr.Passed != vr.Total || !v.marked {
				t.Fatalf("the oracle did not pass sealed: %d/%d, %v, marked %v\n%s", vr.Passed, vr.Total, err, v.marked, v.output)
			}
			r.noRunnerFindings(id, v)
			// Planted over a packaged module: flagged, with why.
			plant := "cd /usr/lib/x86_64-linux-gnu && for f in libnss_systemd.so.2 libnss_compat.so; do [ -e $f ] && rm -f $f && cp libz.so.1 $f; done; echo planted"
			if code, out := r.exec(id, []string{"bash", "-c", plant}, nil, "/"); code != 0 {
				t.Fatalf("plant: %d %s", code, out)
			}
			f := r.tamper(id)
			if len(f) != 1 || !strings.HasPrefix(f[0].Path, "/usr/lib/x86_64-linux-gnu/libnss_") || !strings.Contains(f[0].Reason, "ships") {
				t.Fatalf("a module planted over the package's: %v", f)
			}
			t.Logf("planted: %v", f)
		})
	}
}

// TestVerifierNeverLoadsContainerNSSModules plants an NSS module and names it
// in nsswitch.conf, then looks up a user with the toolchain's Python: the
// module is not mapped (the toolchain's loader searches only the
// toolchain). Through the container's loader, the same Python maps it: the
// loader patch is what keeps it out.
func TestVerifierNeverLoadsContainerNSSModules(t *testing.T) {
	r := newRig(t)
	id := r.sandbox(r.baseTag())
	plant := "cp /usr/lib/x86_64-linux-gnu/libnss_files.so.2 /usr/lib/x86_64-linux-gnu/libnss_evil.so.2 && sed -i 's/^passwd:.*/passwd: evil files/' /etc/nsswitch.conf && echo planted"
	if code, out := r.exec(id, []string{"bash", "-c", plant}, nil, "/"); code != 0 {
		t.Fatalf("plant: %d %s", code, out)
	}
	m := sandbox.ToolchainMount
	probe := "import pwd; pwd.getpwnam('root'); print('mapped' if 'libnss_evil' in open('/proc/self/maps').read() else 'clean')"
	_, sealed := r.exec(id, []string{m + "/bin/python3", "-c", probe}, sandbox.ToolchainExecEnv, "/")
	_, unsealed := r.exec(id, []string{"/lib64/ld-linux-x86-64.so.2", m + "/py/bin/python3.11", "-c", probe}, sandbox.ToolchainExecEnv, "/")
	t.Logf("toolchain loader: %s; container loader: %s", strings.TrimSpace(sealed), strings.TrimSpace(unsealed))
	if strings.TrimSpace(sealed) != "clean" {
		t.Errorf("the toolchain's Python loaded the container's NSS module: %s", sealed)
	}
	if strings.TrimSpace(unsealed) != "mapped" {
		t.Errorf("through the container's loader the module should load (else this test shows nothing): %s", unsealed)
	}
}
