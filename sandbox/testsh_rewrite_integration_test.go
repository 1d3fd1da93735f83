package sandbox_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/testenv"
)

// appendToTestSh is a solution module that, imported by the tests, appends a
// line to /tests/test.sh. Bash read a script as it ran it, so with test.sh
// running as root (it can write /tests) the line ran after pytest, outside
// the runner's Landlock domain and holding descriptor 61: there it could run
// a session of its own on the channel (41 of 45 counted, by hand). The line
// here only leaves a mark.
const appendToTestSh = `cat > /app/inventory.py <<'PY'
def load(path): return []
def in_stock(rows): return []
def value(rows): return 0
def restock(rows, sku, n): return rows


with open("/tests/test.sh", "a") as f:
    f.write("\necho appended >/tmp/.appended-ran\n")
PY
`

func TestProbeAppendsToTestSh(t *testing.T) {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	r := newProbeRig(t, filepath.Join(testenv.RepoRoot(), "examples/tb2/inventory-module"))
	r.agent(appendToTestSh)
	vr, err := r.a.Verify(context.Background(), activities.VerifyInput{
		Sandbox: activities.Sandbox{ContainerID: r.id, Name: "probe"}, Task: r.ref, RolloutID: "probe",
	})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	t.Logf("Verify: resolved %v, %d/%d passed, tampered %v", vr.Resolved, vr.Passed, vr.Total, vr.Tampered)
	if got := r.agent("cat /tmp/.appended-ran 2>/dev/null; true"); strings.Contains(got, "appended") {
		t.Fatalf("a line the solution appended to /tests/test.sh while the tests ran was run by test.sh's shell")
	}
	if vr.Resolved {
		t.Fatalf("resolved with nothing solved")
	}
}
