package sandbox_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/testenv"
)

// inprocessResolves are the in-process cheats that, judged by the result
// files alone, resolve inventory-module: the runner's channel is what stops
// them (the others are caught without winning anything).
var inprocessResolves = map[string]bool{"report-rewrite.sh": true, "report-global.sh": true, "exit-forgery.sh": true}

// TestSealedVerifierCatchesInProcessCheats plants each cheat of
// examples/cheats/inprocess, a solution module the tests import that
// subverts the runner from inside, and checks that the tamper check (which
// sees only a file in /app) stays clean, the verifier runs, and what the
// runner reported over its channel makes the outcome tampered with evidence.
// Where the result files alone say the task is solved, the channel is
// shown to be what stops it.
func TestSealedVerifierCatchesInProcessCheats(t *testing.T) {
	r := newRig(t)
	dir := filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module")
	img := r.image(dir, r.baseTag())
	cheats, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "examples/cheats/inprocess/*.sh"))
	if len(cheats) < 6 {
		t.Fatalf("only %d in-process cheats", len(cheats))
	}
	for _, c := range cheats {
		name := filepath.Base(c)
		t.Run(name, func(t *testing.T) {
			r.t = t
			id := r.sandbox(img)
			if code, out := r.exec(id, []string{"bash", "-c", readFile(t, c)}, nil, ""); code != 0 || !strings.Contains(out, "planted") {
				t.Fatalf("planting: %d %s", code, out)
			}
			if f := r.tamper(id); len(f) != 0 {
				t.Fatalf("the tamper check flags a module in /app: %v", f)
			}
			v := r.verify(id, dir)
			vr, err := r.results(id)
			if err != nil {
				t.Fatalf("results: %v\n%s", err, v.output)
			}
			found := activities.RunnerDisagrees(vr, v.channel)
			t.Logf("%s: files say %d/%d (%s); %d sessions on the channel; findings: %v", name, vr.Passed, vr.Total, vr.Format, v.channel.Sessions, found)
			if len(found) == 0 {
				t.Fatalf("not caught: files %d/%d, channel %+v\n%s", vr.Passed, vr.Total, v.channel, v.output)
			}
			if inprocessResolves[name] && (vr.Total == 0 || vr.Passed != vr.Total) {
				t.Errorf("judged by the files alone this cheat should resolve the task (else this shows nothing): %d/%d", vr.Passed, vr.Total)
			}
		})
	}
}
