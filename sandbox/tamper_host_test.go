package sandbox_test

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/t1flow/t1flow/sandbox"
)

// changesScript changes a sandbox the ways agents and cheats do: files added,
// rewritten and deleted, a directory replaced (opaque), symlinks over /tests
// and /logs/verifier, a preload list, an NSS module and nsswitch.conf entry,
// pytest configuration at /, a runner shadow in the working directory.
const changesScript = `set -e
mkdir -p /app/src /srv/data/deep && echo x > /app/src/main.py && echo y > /srv/data/deep/f
echo changed >> /etc/hostname.t1 ; echo '# edited' >> /etc/bash.bashrc
rm -f /etc/issue.net && rm -rf /usr/share/doc/bash
rm -rf /var/lib/apt && mkdir -p /var/lib/apt/lists && echo z > /var/lib/apt/lists/new
ln -sfn /tmp/elsewhere /tests && mkdir -p /logs && ln -sfn /tmp /logs/verifier
echo /tmp/evil.so > /etc/ld.so.preload && echo 'def pytest_configure(): pass' > /conftest.py
cp /usr/lib/x86_64-linux-gnu/libnss_files.so.2 /usr/lib/x86_64-linux-gnu/libnss_evil.so.2
sed -i 's/^passwd:.*/passwd: files evil/' /etc/nsswitch.conf
touch /app/pytest.py /app/evil.pth
echo planted`

// TestHostChangesMatchDockerDiff reads a changed sandbox both ways (its
// upper directory on this host, and the daemon's docker diff) and checks the
// tamper check finds the same things either way, and that every file docker
// diff reports is read from the upper directory with the same kind.
func TestHostChangesMatchDockerDiff(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.sandbox(r.baseTag())
	if code, out := r.exec(id, []string{"bash", "-c", changesScript}, nil, "/"); code != 0 {
		t.Fatalf("changes: %d %s", code, out)
	}
	r.kill(id)
	ins, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	host, src, err := sandbox.Changes(ctx, r.cli, ins)
	tookHost := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if src != sandbox.ChangesFromHost {
		if ins.GraphDriver.Name == "overlay2" && os.Geteuid() == 0 {
			t.Fatalf("overlay2 and root, yet the changes came from %s", src)
		}
		t.Skipf("changes come from %s here (driver %s, euid %d): nothing to compare", src, ins.GraphDriver.Name, os.Geteuid())
	}
	t0 = time.Now()
	daemon, err := r.cli.ContainerDiff(ctx, id)
	tookDaemon := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d changes from the upper directory in %s, %d from docker diff in %s", len(host), tookHost, len(daemon), tookDaemon)
	kinds := map[string]container.ChangeType{}
	for _, c := range host {
		kinds[c.Path] = c.Kind
	}
	for _, c := range daemon {
		k, ok := kinds[c.Path]
		switch {
		case !ok && c.Kind == container.ChangeDelete:
			// The naive diff lists each file under a replaced (opaque)
			// directory as deleted; the upper directory has the directory.
			if !changedAbove(kinds, c.Path) {
				t.Errorf("docker diff: D %s, the upper directory has nothing above it", c.Path)
			}
		case !ok && c.Kind == container.ChangeModify && changedBelow(host, c.Path):
			// The naive diff lists every directory above a change; the
			// overlay walk (dockerd's native diff) only changed ones and the
			// parents of additions and deletions.
		case !ok:
			t.Errorf("docker diff: %v %s, missing from the upper directory", c.Kind, c.Path)
		case k != c.Kind:
			t.Errorf("%s: %v from the upper directory, %v from docker diff", c.Path, k, c.Kind)
		}
	}
	want, got := findings(daemon), findings(host)
	if len(want) < 5 || !equal(want, got) {
		t.Errorf("findings differ:\n docker diff:     %v\n upper directory: %v", want, got)
	}
}

// changedBelow reports whether changes has something below directory dir.
func changedBelow(changes []container.FilesystemChange, dir string) bool {
	for _, c := range changes {
		if strings.HasPrefix(c.Path, dir+"/") {
			return true
		}
	}
	return false
}

// changedAbove reports whether a directory above p is among the changes.
func changedAbove(kinds map[string]container.ChangeType, p string) bool {
	for d := dirOf(p); d != "/"; d = dirOf(d) {
		if _, ok := kinds[d]; ok {
			return true
		}
	}
	return false
}

func dirOf(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

func findings(changes []container.FilesystemChange) []string {
	var out []string
	for _, f := range sandbox.TamperDiff(changes, "/app") {
		out = append(out, f.Kind+" "+f.Path)
	}
	sort.Strings(out)
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
