package activities

import (
	"strings"
	"testing"

	"github.com/t1flow/t1flow/sandbox"
)

func channelOf(lines ...string) sandbox.RunnerChannel {
	b := strings.Join(lines, "\n") + "\n"
	return sandbox.ParseRunnerChannel([]byte(b), int64(len(b)))
}

func TestRunnerDisagrees(t *testing.T) {
	run := []string{
		`{"ev":"guard","pid":7}`, `{"ev":"session-start","pid":7}`,
		`{"ev":"call","nodeid":"test_outputs.py::test_a","raised":false}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_a","when":"call","outcome":"passed"}`,
		`{"ev":"call","nodeid":"test_outputs.py::test_b[1]","raised":true}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_b[1]","when":"call","outcome":"passed"}`, // rewritten report
		`{"ev":"session-finish","pid":7,"exitstatus":1}`,
	}
	ctrf := func(b string) VerifyResult {
		return VerifyResult{Format: "ctrf", Passed: 2, Total: 2, Assertions: []Assertion{
			{Name: "test_outputs.py::test_a", Status: StatusPassed}, {Name: "test_outputs.py::test_b", Status: b}}}
	}
	if f := RunnerDisagrees(ctrf(StatusFailed), channelOf(run...)); len(f) != 0 {
		t.Errorf("agreeing results flagged: %v", f)
	}
	f := RunnerDisagrees(ctrf(StatusPassed), channelOf(run...))
	if len(f) != 1 || !strings.Contains(f[0].Reason, "test_b: 1 passed in the results, the runner saw 0") {
		t.Errorf("a pass the runner saw fail: %v", f)
	}
	// A forged line cannot undo a failure the runner reported.
	forged := append(append([]string{}, run...), `{"ev":"report","nodeid":"test_outputs.py::test_b[1]","when":"call","outcome":"passed"}`, "not json", `{"ev":"call"`)
	if f := RunnerDisagrees(ctrf(StatusPassed), channelOf(forged...)); len(f) != 1 {
		t.Errorf("forged lines: %v", f)
	}
	junit := VerifyResult{Format: "junit", Passed: 1, Total: 1, Assertions: []Assertion{{Name: "tests.test_outputs.TestX::test_c[2]", Status: StatusPassed}}}
	ok := channelOf(`{"ev":"session-start"}`, `{"ev":"report","nodeid":"tests/test_outputs.py::TestX::test_c[2]","when":"call","outcome":"passed"}`)
	if f := RunnerDisagrees(junit, ok); len(f) != 0 {
		t.Errorf("junit names: %v", f)
	}
	reward := VerifyResult{Format: "reward.txt", Passed: 1, Total: 1}
	if f := RunnerDisagrees(reward, channelOf(run...)); len(f) != 1 {
		t.Errorf("reward 1 after a session that exited 1: %v", f)
	}
	if f := RunnerDisagrees(reward, channelOf(`{"ev":"session-start"}`, `{"ev":"session-finish","exitstatus":0}`)); len(f) != 0 {
		t.Errorf("reward 1 after exit 0: %v", f)
	}
	// No sealed pytest session: nothing to compare (a test.sh without pytest).
	if f := RunnerDisagrees(reward, channelOf()); len(f) != 0 {
		t.Errorf("no session: %v", f)
	}
	// Evidence always counts, whatever the results.
	ev := channelOf(`{"ev":"audit","pid":9,"what":"foreign write to the results","detail":"/logs/verifier/ctrf.json","where":"/app/m.py:3"}`)
	if f := RunnerDisagrees(VerifyResult{Format: "ctrf"}, ev); len(f) != 1 || f[0].Path != "/app/m.py:3" || f[0].Kind != "runtime" {
		t.Errorf("evidence: %v", f)
	}
	// A channel cut short corroborates nothing.
	b := strings.Join(run, "\n")
	over := sandbox.ParseRunnerChannel([]byte(b), int64(len(b))+100)
	if f := RunnerDisagrees(ctrf(StatusFailed), over); len(f) != 1 || !strings.Contains(f[0].Reason, "overflowed") {
		t.Errorf("overflow: %v", f)
	}
}
