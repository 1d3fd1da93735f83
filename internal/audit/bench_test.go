package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The labeled benchmark's static half: hidden requirements and shortcut
// solutions are decided by reading, so every label must come out here; the
// executable half (weak verifiers, leaks) runs in `make bench`.
func TestBenchmarkStaticLabels(t *testing.T) {
	root := "../../bench/audit-tasks"
	var labels struct{ Tasks map[string]string }
	b, err := os.ReadFile(filepath.Join(root, "labels.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &labels); err != nil {
		t.Fatal(err)
	}
	if len(labels.Tasks) < 30 {
		t.Fatalf("%d labeled tasks, want at least 30", len(labels.Tasks))
	}
	for name, label := range labels.Tasks {
		s := analyze(t, filepath.Join(root, name))
		if got := len(s.HiddenPaths) > 0; got != (label == HiddenRequirements) {
			t.Errorf("%s (%q): hidden %v", name, label, s.Hidden)
		}
		if got := len(s.Shortcuts) > 0; got != (label == ShortcutSolution) {
			t.Errorf("%s (%q): shortcuts %v", name, label, s.Shortcuts)
		}
		// Sound tasks (real-task-shaped ones among them) must not be hard
		// rejected for a leak that reading claims.
		if label == "" && len(s.Leaks) > 0 {
			t.Errorf("%s (sound): leaks %v", name, s.Leaks)
		}
		if label == TestLeakage && len(s.Leaks) == 0 && s.Agents.Leak == "" {
			t.Errorf("%s: a leak task with neither a static finding nor a leak seeker", name)
		}
		if label == WeakVerifier && s.Agents.Trivial == "" && len(s.Outputs) > 0 {
			t.Errorf("%s: no trivial agent", name)
		}
	}
	// the misses, by name
	s := analyze(t, filepath.Join(root, "csv-total-script"))
	if strings.Join(s.Inputs, ",") != "/app/data/sample.csv" || len(s.Hidden) != 0 {
		t.Errorf("csv-total-script: the sample the tests read is an input: inputs %v hidden %v", s.Inputs, s.Hidden)
	}
	if s = analyze(t, filepath.Join(root, "hidden-count-report")); len(s.Hidden) != 1 || !strings.Contains(s.Hidden[0], "test_count_report") {
		t.Errorf("hidden requirement evidence names the assertion: %v", s.Hidden)
	}
}
