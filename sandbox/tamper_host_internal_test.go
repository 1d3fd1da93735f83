package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/storage"
	"golang.org/x/sys/unix"
)

// A synthetic overlay2 layer pair: what hostChanges makes of each kind of
// upper-directory entry, and when it gives up so that the daemon is asked.
func TestHostChangesWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reads layers as root only")
	}
	root := t.TempDir()
	upper, lower := filepath.Join(root, "upper"), filepath.Join(root, "lower")
	for _, d := range []string{"etc", "usr/lib", "app/old/sub", "srv"} {
		os.MkdirAll(filepath.Join(lower, d), 0o755)
	}
	os.WriteFile(filepath.Join(lower, "etc/passwd"), []byte("root\n"), 0o644)
	os.WriteFile(filepath.Join(lower, "etc/issue"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(lower, "app/old/sub/f"), []byte("x\n"), 0o644)
	for _, d := range []string{"etc", "usr/lib", "app/old"} {
		os.MkdirAll(filepath.Join(upper, d), 0o755)
	}
	os.WriteFile(filepath.Join(upper, "etc/passwd"), []byte("root\nevil\n"), 0o644)
	os.WriteFile(filepath.Join(upper, "etc/ld.so.preload"), []byte("/x.so\n"), 0o644)
	if err := unix.Mknod(filepath.Join(upper, "etc/issue"), unix.S_IFCHR, 0); err != nil {
		t.Skipf("mknod a whiteout: %v", err)
	}
	if err := unix.Setxattr(filepath.Join(upper, "app/old"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("trusted xattrs: %v", err)
	}
	// Copied up unchanged (same mode, size and time): not a change.
	for _, d := range []string{"usr", "usr/lib", "app"} {
		st, _ := os.Stat(filepath.Join(lower, d))
		os.Chtimes(filepath.Join(upper, d), st.ModTime(), st.ModTime())
	}
	ins := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{GraphDriver: storage.DriverData{
		Name: "overlay2", Data: map[string]string{"UpperDir": upper, "LowerDir": lower},
	}}}
	got, err := hostChanges(ins)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]container.ChangeType{}
	for _, c := range got {
		kinds[c.Path] = c.Kind
	}
	want := map[string]container.ChangeType{
		"/etc": container.ChangeModify, "/etc/passwd": container.ChangeModify, "/etc/ld.so.preload": container.ChangeAdd,
		"/etc/issue": container.ChangeDelete, "/app/old": container.ChangeModify, // opaque: made again

	}
	for p, k := range want {
		if kinds[p] != k || len(kinds) != len(want) {
			t.Errorf("%s: got %v, want %v (all: %v)", p, kinds[p], k, got)
		}
	}
	// A redirected directory keeps its contents in a lower layer: ask the daemon.
	unix.Setxattr(filepath.Join(upper, "usr/lib"), "trusted.overlay.redirect", []byte("/srv"), 0)
	if _, err := hostChanges(ins); err != errNoHostChanges {
		t.Errorf("redirect: %v", err)
	}
	ins.GraphDriver.Name = "vfs"
	if _, err := hostChanges(ins); err != errNoHostChanges {
		t.Errorf("vfs: %v", err)
	}
}
