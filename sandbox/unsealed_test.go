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
}
