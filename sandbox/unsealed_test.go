package sandbox_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// unsealedPrepare and the exec below are verification as it was before the
// sealed toolchain: the container's own bash, rm, mkdir, timeout and python3.
const unsealedPrepare = `kill -9 -1 2>/dev/null; sleep 0.05; kill -9 -1 2>/dev/null; ` +
	`rm -rf /tests /logs/verifier && mkdir -p /logs/verifier /tests`

// verifyUnsealed runs test.sh the old way and parses what it left.
func (r *rig) verifyUnsealed(id, taskDir string) (activities.VerifyResult, error) {
	r.t.Helper()
	r.exec(id, []string{"bash", "-c", unsealedPrepare}, nil, "/")
	r.copyDir(id, filepath.Join(taskDir, "tests"), "/tests")
	r.exec(id, []string{"timeout", "-k", "5", "120", "bash", "-c", "bash /tests/test.sh"}, nil, "")
	return r.results(id)
}

// results parses what a verification left in /logs/verifier.
func (r *rig) results(id string) (activities.VerifyResult, error) {
	rc, _, err := r.cli.CopyFromContainer(context.Background(), id, "/logs/verifier")
	if err != nil {
		return activities.VerifyResult{}, err
	}
	defer rc.Close()
	var b bytes.Buffer
	b.ReadFrom(rc)
	files, err := sandbox.UntarFiles(b.Bytes(), 4<<20)
	if err != nil {
		return activities.VerifyResult{}, err
	}
	return activities.ParseResults(files)
}

// TestEachDefenceMatters plants the three cheats the issue found on a task
// with no solution and shows that each resolves it when verification is
// unsealed, and none does sealed: the toolchain, not luck, defeats them.
func TestEachDefenceMatters(t *testing.T) {
	r := newRig(t)
	dir := filepath.Join(testenv.RepoRoot(), "examples/tasks/csv-revenue-report")
	img := r.image(dir, r.baseTag())
	for _, name := range []string{"path-shadow.sh", "root-pytest-config.sh", "pth-plugin.sh"} {
		t.Run(name, func(t *testing.T) {
			r.t = t
			script := readFile(t, filepath.Join(testenv.RepoRoot(), "examples/cheats", name))
			unsealed := r.sandbox(img)
			if code, out := r.exec(unsealed, []string{"bash", "-c", script}, nil, ""); code != 0 {
				t.Fatalf("planting: %d %s", code, out)
			}
			start := time.Now()
			vr, err := r.verifyUnsealed(unsealed, dir)
			if err != nil || vr.Total == 0 || vr.Passed != vr.Total {
				t.Fatalf("unsealed, the cheat should resolve the task (else this test shows nothing): %d/%d, %v", vr.Passed, vr.Total, err)
			}
			t.Logf("%s unsealed: %d/%d passed (%s) in %s", name, vr.Passed, vr.Total, vr.Format, time.Since(start))
			sealed := r.sandbox(img)
			if code, out := r.exec(sealed, []string{"bash", "-c", script}, nil, ""); code != 0 {
				t.Fatalf("planting: %d %s", code, out)
			}
			v := r.verify(sealed, dir)
			vr, err = r.results(sealed)
			if err != nil || vr.Total != 5 || vr.Passed != 0 || !v.marked {
				t.Fatalf("sealed: the cheat reached the verdict: %d/%d passed, %v\n%s", vr.Passed, vr.Total, err, v.output)
			}
			t.Logf("%s sealed: %d/%d passed (%s)", name, vr.Passed, vr.Total, vr.Format)
		})
	}
	t.Run("runner-channel-and-audit-hook", func(t *testing.T) {
		r.t = t
		inprocessDefencesMatter(t, r)
	})
}

// inprocessDefencesMatter plays the in-process cheats (solution modules the
// tests import) with the two defences of the sealed runner taken away in
// turn, at judgment: the runner's channel (results judged by the files
// alone) and the audit hook (the channel's comparison without the hook's
// and plugin's evidence). Without the channel the report and exit-handler
// forgeries resolve the task; without the hook's evidence the cheats that
// patch sys.modules, builtins or call ctypes are no longer seen at all (they
// would end unresolved instead of tampered). With both, every one is caught.
func inprocessDefencesMatter(t *testing.T, r *rig) {
	dir := filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module")
	img := r.image(dir, r.baseTag())
	onlyHook := 0
	for _, name := range []string{"report-rewrite.sh", "exit-forgery.sh", "sys-modules.sh", "builtins.sh", "ctypes.sh"} {
		id := r.sandbox(img)
		if code, out := r.exec(id, []string{"bash", "-c", readFile(t, filepath.Join(testenv.RepoRoot(), "examples/cheats/inprocess", name))}, nil, ""); code != 0 {
			t.Fatalf("%s: planting: %d %s", name, code, out)
		}
		v := r.verify(id, dir)
		vr, err := r.results(id)
		if err != nil {
			t.Fatalf("%s: results: %v\n%s", name, err, v.output)
		}
		all := activities.RunnerDisagrees(vr, v.channel)
		noHook := v.channel
		noHook.Evidence = nil
		withoutHook := activities.RunnerDisagrees(vr, noHook)
		t.Logf("%s: files alone %d/%d; %d findings with the hook, %d without", name, vr.Passed, vr.Total, len(all), len(withoutHook))
		if len(all) == 0 {
			t.Errorf("%s: not caught with every defence on", name)
		}
		if inprocessResolves[name] {
			if vr.Total == 0 || vr.Passed != vr.Total {
				t.Errorf("%s: without the channel (files alone) it should resolve the task: %d/%d", name, vr.Passed, vr.Total)
			}
			if len(withoutHook) == 0 {
				t.Errorf("%s: the channel's comparison alone should catch it", name)
			}
		} else if len(withoutHook) == 0 {
			onlyHook++
		}
	}
	if onlyHook == 0 {
		t.Errorf("no cheat was caught by the audit hook alone: this shows the hook matters for none")
	}
}
