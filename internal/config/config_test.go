package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHomeIsAbsolute: a relative T1FLOW_HOME (T1FLOW_HOME=.t1flow bin/worker)
// and the default both resolve against the working directory, so the paths
// handed to child processes that run elsewhere still name the same place; an
// absolute one is kept, and StoreDir follows Home.
func TestHomeIsAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	wd, err := os.Getwd() // dir with any symlink in it resolved as Abs sees it
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("T1FLOW_STORE", "")
	for _, tc := range []struct{ env, want string }{
		{"", filepath.Join(wd, ".t1flow")},
		{".t1flow", filepath.Join(wd, ".t1flow")},
		{"state/../home", filepath.Join(wd, "home")},
		{"/srv/t1flow", "/srv/t1flow"},
	} {
		t.Setenv("T1FLOW_HOME", tc.env)
		if got := Home(); got != tc.want {
			t.Errorf("T1FLOW_HOME=%q: Home() = %q, want %q", tc.env, got, tc.want)
		}
		if got, want := StoreDir(), filepath.Join(tc.want, "store"); got != want {
			t.Errorf("T1FLOW_HOME=%q: StoreDir() = %q, want %q", tc.env, got, want)
		}
	}
}
