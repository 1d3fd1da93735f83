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

// TestHostChangesMatchDockerDiff reads a changed sandbox both ways (on this
// host: its overlay2 upper directory, or its btrfs snapshot beside its init
// layer; and the daemon's docker diff) and checks the tamper check finds the
// same things either way, and that every file docker diff reports is read on
// the host with the same kind.
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
	if src == sandbox.ChangesFromDaemon {
		if (ins.GraphDriver.Name == "overlay2" || ins.GraphDriver.Name == "btrfs") && os.Geteuid() == 0 {
			t.Fatalf("%s and root, yet the changes came from %s", ins.GraphDriver.Name, src)
		}
		t.Skipf("changes come from %s here (driver %s, euid %d): nothing to compare", src, ins.GraphDriver.Name, os.Geteuid())
	}
	t0 = time.Now()
	daemon, err := r.cli.ContainerDiff(ctx, id)
	tookDaemon := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d %s in %s, %d from docker diff in %s", len(host), src, tookHost, len(daemon), tookDaemon)
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

// TestSnapshotChangesSeeAnMtimeReset: on the btrfs driver, an NSS module
// rewritten in place at its old size with its mtime set back (touch -r), the
// change docker's naive diff cannot see (it compares mode, owner, size and
// mtime only), is still a change read from the snapshot (its ctime moved),
// and the tamper check flags it.
func TestSnapshotChangesSeeAnMtimeReset(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.sandbox(r.baseTag())
	const script = `set -e
f=$(readlink -f /usr/lib/x86_64-linux-gnu/libnss_files.so.2)
cp -p "$f" /tmp/orig
printf 'X' | dd of="$f" bs=1 seek=4096 conv=notrunc 2>/dev/null
touch -r /tmp/orig "$f"
cmp -s /tmp/orig "$f" && exit 3
[ "$(stat -c %s.%Y /tmp/orig)" = "$(stat -c %s.%Y "$f")" ] || exit 4
echo "$f"`
	code, out := r.exec(id, []string{"bash", "-c", script}, nil, "/")
	if code != 0 {
		t.Fatalf("rewrite: %d %s", code, out)
	}
	words := strings.Fields(out)
	target := words[len(words)-1]
	r.kill(id)
	ins, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	changes, src, err := sandbox.Changes(ctx, r.cli, ins)
	if err != nil {
		t.Fatal(err)
	}
	if src != sandbox.ChangesFromSnapshot {
		if ins.GraphDriver.Name == "btrfs" && os.Geteuid() == 0 {
			t.Fatalf("btrfs and root, yet the changes came from %s", src)
		}
		t.Skipf("changes come from %s here (driver %s): the btrfs snapshot walk is not used", src, ins.GraphDriver.Name)
	}
	found := false
	for _, c := range changes {
		found = found || (c.Path == target && c.Kind == container.ChangeModify)
	}
	if !found {
		t.Fatalf("%s rewritten with its mtime set back: not among the %d changes read from the snapshot", target, len(changes))
	}
	flagged := false
	for _, f := range sandbox.TamperDiff(changes, "/app") {
		flagged = flagged || f.Path == target
	}
	if !flagged {
		t.Errorf("%s changed, but the tamper check does not flag it", target)
	}
	daemon, err := r.cli.ContainerDiff(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, c := range daemon {
		seen = seen || c.Path == target
	}
	t.Logf("docker diff lists %s: %v (its naive diff compares size and mtime only)", target, seen)
}
