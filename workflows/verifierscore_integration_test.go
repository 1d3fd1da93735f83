package workflows_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/workflows"
)

// TestAgentThatBreaksItsVerifierScoresZero: an agent that cannot solve a task
// can leave its sandbox so that the verifier fails there. A fifo on an output
// the tests read hangs them until verifier.timeout_sec (5 s here) on every
// try; a working directory removed keeps test.sh from starting. Each is a
// scored 0 (verifier_error, the cause in its error), not a rollout left out:
// before GetVersion verifier-error-scored the fifo's rollout was an unscored
// verifier_error and the removed directory an unscored infra_error after
// three fresh sandboxes, each a new try at the task. With
// T1FLOW_RECORD_HISTORY=1 the fifo's rollout is recorded for the replay test.
func TestAgentThatBreaksItsVerifierScoresZero(t *testing.T) {
	r := newRig(t, true)
	cheats := map[string]string{
		"fifo-output":     "mkdir -p /app/out && echo a > /app/out/a.txt && mkfifo /app/out/b.txt",
		"workdir-removed": "cd / && rm -rf /app",
	}
	want := map[string]string{
		"fifo-output":     "tests/test.sh timed out after 5s",
		"workdir-removed": "enter the working directory /app",
	}
	var dirs []string
	for name, solve := range cheats {
		dirs = append(dirs, cheatVariant(t, name, solve))
	}
	refs := r.load(t, dirs...)
	start := time.Now()
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Agent: activities.AgentSpec{Kind: activities.AgentOracle}, Concurrency: 2}), 10*time.Minute)
	t.Logf("sweep took %s", time.Since(start).Round(time.Second))
	if len(rep.Rollouts) != len(cheats) {
		t.Fatalf("%d rollouts, want %d", len(rep.Rollouts), len(cheats))
	}
	for _, ro := range rep.Rollouts {
		t.Logf("%s: %s, scored %v, reward %v, %d sandbox(es): %s", ro.Name, ro.Outcome, ro.Scored, ro.Reward, ro.SandboxAttempts, ro.Error)
		if ro.Outcome != workflows.OutcomeVerifierError || !ro.Scored || ro.Reward != 0 || ro.Resolved || ro.SandboxAttempts != 1 || !strings.Contains(ro.Error, want[ro.Name]) {
			t.Errorf("%s: %s (scored %v, reward %v) after %d sandbox(es): want a scored 0 (verifier_error) in the agent's one sandbox, saying %q; error: %s",
				ro.Name, ro.Outcome, ro.Scored, ro.Reward, ro.SandboxAttempts, want[ro.Name], ro.Error)
		}
		if ro.Name == "fifo-output" {
			recordHistory(t, r.c, ro.WorkflowID, "testdata/rollout_verifier_error_scored.json")
		}
	}
	if rep.Summary.Scored != len(cheats) || rep.Summary.Unscored != 0 || rep.Summary.ResolvedRate != 0 {
		t.Errorf("summary: %d scored, %d unscored, resolved rate %v: want every rollout a scored 0", rep.Summary.Scored, rep.Summary.Unscored, rep.Summary.ResolvedRate)
	}
}

// cheatVariant copies testdata/tasks/partial-solution as task name, its
// solution replaced by solve and verifier.timeout_sec set to 5.
func cheatVariant(t *testing.T, name, solve string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dir, os.DirFS("testdata/tasks/partial-solution")); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "task.toml"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(cfg), "[verifier]\ntimeout_sec = 60.0", "[verifier]\ntimeout_sec = 5.0", 1)
	if changed == string(cfg) {
		t.Fatal("partial-solution's task.toml no longer sets [verifier] timeout_sec = 60.0")
	}
	if err := os.WriteFile(filepath.Join(dir, "task.toml"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "solution", "solve.sh"), []byte("#!/bin/bash\n"+solve+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
