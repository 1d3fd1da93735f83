package sandbox_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/t1flow/t1flow/internal/testenv"
)

// TestNoFalseFlagsOnOracles runs the oracle of every bench/audit-tasks and
// examples/tb2 task (examples/tasks and examples/installs have their own
// tests, which check the same) and verifies it sealed: neither the tamper
// check nor the runner's channel may flag a correct solution. The false-flag
// rate it measures must be 0.
func TestNoFalseFlagsOnOracles(t *testing.T) {
	r := newRig(t)
	var dirs []string
	for _, g := range []string{"bench/audit-tasks/*/task.toml", "examples/tb2/*/task.toml"} {
		m, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), g))
		for _, p := range m {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	if len(dirs) < 20 {
		t.Fatalf("only %d tasks", len(dirs))
	}
	flagged := 0
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			r.t = t
			id := r.sandbox(r.image(dir, r.baseTag()))
			r.copyDir(id, filepath.Join(dir, "solution"), "/solution")
			ins, _ := r.cli.ContainerInspect(context.Background(), id)
			if code, out := r.exec(id, []string{"bash", "/solution/solve.sh"}, nil, ins.Config.WorkingDir); code != 0 {
				t.Fatalf("solve.sh: %d %s", code, out)
			}
			if f := r.tamper(id); len(f) != 0 {
				flagged++
				t.Fatalf("tamper check on the oracle: %v", f)
			}
			v := r.verify(id, dir)
			if vr, err := r.results(id); err == nil && v.channel.Sessions > 0 {
				before := t.Failed()
				r.noRunnerFindings(id, v)
				if !before && t.Failed() {
					flagged++
				}
				t.Logf("%d/%d passed (%s), %d tests on the channel", vr.Passed, vr.Total, vr.Format, len(v.channel.Tests))
			} else {
				t.Logf("no pytest session or no results (%v): nothing to compare", err)
			}
		})
	}
	t.Logf("false flags: %d of %d oracles", flagged, len(dirs))
}
