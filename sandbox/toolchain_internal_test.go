package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A toolchain built under umask 077 is opened to every user: a non-root
// verifier.user must be able to run its bash and read its Python.
func TestToolchainTreeIsReadableByAllUnderAStrictUmask(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o077))
	dir := filepath.Join(t.TempDir(), "out")
	for _, d := range []string{"bin", "lib/python3/site"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "bin/bash"), []byte("#!"), 0o755)
	os.WriteFile(filepath.Join(dir, "lib/python3/site/x.py"), []byte("x"), 0o644)
	os.Symlink("bash", filepath.Join(dir, "bin/sh"))
	if fi, _ := os.Stat(filepath.Join(dir, "bin")); fi.Mode().Perm() != 0o700 {
		t.Fatalf("umask 077 made bin/ %v; the test expects 0700", fi.Mode().Perm())
	}
	if err := readableByAll(dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{".": 0o755, "bin": 0o755, "lib/python3/site": 0o755, "bin/bash": 0o755, "lib/python3/site/x.py": 0o644}
	for p, m := range want {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || fi.Mode().Perm() != m {
			t.Errorf("%s: %v (%v), want %v", p, fi.Mode().Perm(), err, m)
		}
	}
}
