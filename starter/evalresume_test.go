package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/worker/roles"
)

// Bad --resume and export input is refused before anything is dialled,
// naming the flag (and --checkpoint still refuses another --agent).
func TestResumeFlagsAreChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--resume", "x", "-f", "Bogus"}, `--filter-error-type: error type "Bogus": not one of InfraError`},
		{[]string{"eval", "--tasks", "d", "--filter-error-type", "InfraError"}, "give --resume"},
		{[]string{"eval", "--resume", "x", "--tasks", "d"}, "drop --tasks"},
		{[]string{"eval", "--resume", "x", "--attempts", "3"}, "drop --attempts"},
		{[]string{"eval", "--tasks", "d", "--checkpoint", "c:init", "--agent", "oracle"}, "--checkpoint evaluates the policy agent, not --agent oracle"},
		{[]string{"eval", "export", "x"}, "--dir is empty"},
		{[]string{"eval", "export", "--dir", "d"}, "give one sweep ID"},
	} {
		code, _, _, err := starter(t, c.args...)
		if code != 2 || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, %v; want exit 2 naming %q", c.args, code, err, c.want)
		}
	}
}

// TestEvalResumeAndExportCommands: an oracle sweep, then `eval --resume`
// (nothing errored: the report keeps its one resolved rollout), an unknown
// sweep refused naming --resume, and `eval export --check` whose files
// Harbor's models load; exporting into the same directory again is refused.
func TestEvalResumeAndExportCommands(t *testing.T) {
	srv, c := testenv.DevServer(t)
	d := testenv.Docker(t)
	dir := t.TempDir()
	st, _ := store.NewLocal(dir)
	testenv.Worker(t, c, roles.All, &activities.Activities{Docker: d, Store: st, Temporal: c, Host: testenv.HostName("resume"), TaskCache: t.TempDir()})
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	t.Setenv("T1FLOW_STORE", dir)

	code, out, stderr, err := starter(t, "eval", "--tasks", "../examples/tasks/log-level-counter", "--agent", "oracle", "--json", "--new")
	if code != 0 || err != nil {
		t.Fatalf("eval: %d %v\n%s", code, err, stderr)
	}
	var doc EvalJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	sweep := strings.TrimPrefix(doc.WorkflowID, "eval/")

	code, out, stderr, err = starter(t, "eval", "--resume", sweep, "--json")
	if code != 0 || err != nil {
		t.Fatalf("eval --resume: %d %v\n%s", code, err, stderr)
	}
	var resumed EvalJSON
	if err := json.Unmarshal([]byte(out), &resumed); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "resume 1 of sweep") || resumed.Rollouts != 1 || resumed.Resolved != 1 || resumed.Tasks[0].RolloutID != doc.Tasks[0].RolloutID {
		t.Errorf("resume of a sweep with nothing errored: %s\n%+v; want the same resolved rollout kept", stderr, resumed)
	}

	// Asking for the sweep again shows it as its last resume round has it.
	code, out, stderr, err = starter(t, "eval", "--tasks", "../examples/tasks/log-level-counter", "--agent", "oracle", "--id", sweep, "--json")
	if code != 0 || err != nil || !strings.Contains(stderr, "as of resume 1") || !strings.Contains(out, `"resolved_rate":1`) {
		t.Errorf("the sweep asked again: %d %v\n%s\n%s", code, err, stderr, out)
	}

	code, _, _, err = starter(t, "eval", "--resume", "no-such-sweep")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "--resume no-such-sweep: no eval sweep") {
		t.Errorf("unknown sweep: exit %d, %v", code, err)
	}

	if _, err := os.Stat(harbor.Python()); err != nil {
		if testenv.Required() {
			t.Fatalf("%s: run scripts/ensure-harbor-env.sh (make harborenv)", harbor.Python())
		}
		t.Skipf("no Harbor env at %s (make harborenv)", harbor.Python())
	}
	job := filepath.Join(t.TempDir(), "job")
	code, out, stderr, err = starter(t, "eval", "export", sweep, "--dir", job, "--check")
	if code != 0 || err != nil {
		t.Fatalf("eval export: %d %v\n%s", code, err, stderr)
	}
	if !strings.Contains(out, "wrote 1 trials") || !strings.Contains(out, "harbor reads 1 trials, 0 errored, metrics map[oracle__adhoc:map[mean:1]]") {
		t.Errorf("export: %q", out)
	}
	if _, err := os.Stat(filepath.Join(job, "log-level-counter__1", "agent", "trajectory.json")); err != nil {
		t.Errorf("no trajectory: %v", err)
	}
	code, _, _, err = starter(t, "eval", "export", sweep, "--dir", job)
	if code != 2 || err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Errorf("export into a used directory: exit %d, %v", code, err)
	}
	code, _, _, err = starter(t, "eval", "export", "no-such-sweep", "--dir", filepath.Join(t.TempDir(), "j"))
	if code != 2 || err == nil || !strings.Contains(err.Error(), "no report") {
		t.Errorf("export of an unknown sweep: exit %d, %v", code, err)
	}
}
