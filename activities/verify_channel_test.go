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
		return results("ctrf", Assertion{Name: "test_outputs.py::test_a", Status: StatusPassed}, Assertion{Name: "test_outputs.py::test_b", Status: b})
	}
	if f := RunnerDisagrees(ctrf(StatusFailed), channelOf(run...)); len(f) != 0 {
		t.Errorf("agreeing results flagged: %v", f)
	}
	// A pass the runner saw fail: the results resolve the task the runner
	// did not, and test_b's pass is not the runner's.
	f := RunnerDisagrees(ctrf(StatusPassed), channelOf(run...))
	if len(f) != 2 || !strings.Contains(f[0].Reason, "exited [1]") || !strings.Contains(f[1].Reason, "test_b: 1 passed in the results, the runner saw 0") {
		t.Errorf("a pass the runner saw fail: %v", f)
	}
	// A forged line cannot undo a failure the runner reported.
	forged := append(append([]string{}, run...), `{"ev":"report","nodeid":"test_outputs.py::test_b[1]","when":"call","outcome":"passed"}`, "not json", `{"ev":"call"`)
	if f := RunnerDisagrees(ctrf(StatusPassed), channelOf(forged...)); len(f) != 2 {
		t.Errorf("forged lines: %v", f)
	}
	junit := results("junit", Assertion{Name: "tests.test_outputs.TestX::test_c[2]", Status: StatusPassed})
	ok := channelOf(`{"ev":"session-start"}`, `{"ev":"report","nodeid":"tests/test_outputs.py::TestX::test_c[2]","when":"call","outcome":"passed"}`, `{"ev":"session-finish","exitstatus":0}`)
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

// results is what ParseResults makes of a result file with these tests.
func results(format string, as ...Assertion) VerifyResult {
	vr, err := tally(format, as)
	if err != nil {
		panic(err)
	}
	vr.Resolved = vr.HarborResolved()
	return vr
}

// TestRunnerDisagreesDroppedFailures: results that leave out the tests the
// runner saw fail (TestProbeCTRFDropsFailures: the CTRF rewritten after
// pytest exited, reward.txt kept from being written) resolve nothing: the
// runner's session exited 1 and its failures stand, whatever the file says.
func TestRunnerDisagreesDroppedFailures(t *testing.T) {
	run := []string{
		`{"ev":"session-start","pid":7}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_load","when":"call","outcome":"passed"}`,
		`{"ev":"call","nodeid":"test_outputs.py::test_value","raised":true}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_value","when":"call","outcome":"failed"}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_restock","when":"setup","outcome":"failed"}`,
		`{"ev":"session-finish","pid":7,"exitstatus":1}`,
	}
	dropped := results("ctrf", Assertion{Name: "test_outputs.py::test_load", Status: StatusPassed})
	f := RunnerDisagrees(dropped, channelOf(run...))
	if len(f) != 1 || !strings.Contains(f[0].Reason, "exited [1]") || !strings.Contains(f[0].Reason, "2 tests fail") {
		t.Errorf("dropped failures: %v", f)
	}
	// Reconciled, the runner's failures count (Total from the runner).
	RunnerReconcile(&dropped, channelOf(run...))
	if dropped.Total != 3 || dropped.Passed != 1 || dropped.Resolved || dropped.HarborResolved() {
		t.Errorf("reconciled: %d/%d, resolved %v", dropped.Passed, dropped.Total, dropped.Resolved)
	}
	// reward.txt 1 beside an honest CTRF (written after test.sh's own 0):
	// the reward file decides, and the runner says no.
	one := 1.0
	honest := results("ctrf", Assertion{Name: "test_outputs.py::test_load", Status: StatusPassed},
		Assertion{Name: "test_outputs.py::test_value", Status: StatusFailed}, Assertion{Name: "test_outputs.py::test_restock", Status: StatusFailed})
	if f := RunnerDisagrees(honest, channelOf(run...)); len(f) != 0 {
		t.Errorf("honest results flagged: %v", f)
	}
	honest.Reward, honest.Rewards, honest.RewardFile = &one, map[string]float64{"reward": 1}, "reward.txt"
	honest.Resolved = honest.HarborResolved()
	if f := RunnerDisagrees(honest, channelOf(run...)); len(f) != 1 || !strings.Contains(f[0].Reason, "reward.txt reward 1") {
		t.Errorf("reward.txt 1 after a session that failed: %v", f)
	}
	// A session that never finished (pytest killed after its passes): a
	// pass in the results cannot be checked against what it would have said.
	killed := results("ctrf", Assertion{Name: "test_outputs.py::test_load", Status: StatusPassed}, Assertion{Name: "test_outputs.py::test_value", Status: StatusFailed})
	if f := RunnerDisagrees(killed, channelOf(run[:2]...)); len(f) != 1 || !strings.Contains(f[0].Reason, "never finished") {
		t.Errorf("an unfinished session: %v", f)
	}
	// An expected failure (the function raised, the report says skipped)
	// is no failure; a report rewritten to passed after a raise is one.
	xfail := []string{
		`{"ev":"session-start","pid":7}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_load","when":"call","outcome":"passed"}`,
		`{"ev":"call","nodeid":"test_outputs.py::test_x","raised":true}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_x","when":"call","outcome":"skipped"}`,
		`{"ev":"session-finish","pid":7,"exitstatus":0}`,
	}
	ok := results("ctrf", Assertion{Name: "test_outputs.py::test_load", Status: StatusPassed}, Assertion{Name: "test_outputs.py::test_x", Status: StatusSkipped})
	if f := RunnerDisagrees(ok, channelOf(xfail...)); len(f) != 0 {
		t.Errorf("an xfail flagged: %v", f)
	}
	rewritten := append(append([]string{}, xfail[:3]...), `{"ev":"report","nodeid":"test_outputs.py::test_x","when":"call","outcome":"passed"}`, xfail[4])
	all := results("ctrf", Assertion{Name: "test_outputs.py::test_load", Status: StatusPassed}, Assertion{Name: "test_outputs.py::test_x", Status: StatusPassed})
	if f := RunnerDisagrees(all, channelOf(rewritten...)); len(f) != 2 {
		t.Errorf("a rewritten report: %v", f)
	}
}

// TestRunnerDisagreesForgedChannel: with the channel authenticated, passes
// a process other than the runner wrote there (forged lines for invented
// tests, as TestProbeCTRFDropsFailures writes them) corroborate nothing
// and are evidence themselves.
func TestRunnerDisagreesForgedChannel(t *testing.T) {
	key, err := sandbox.NewChannelKey()
	if err != nil {
		t.Fatal(err)
	}
	src, hello, err := sandbox.NewChannelSource(key.Public(), 7)
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{hello,
		src.Line(`{"ev":"session-start","pid":7}`),
		src.Line(`{"ev":"report","nodeid":"test_outputs.py::test_load","when":"call","outcome":"passed"}`),
		src.Line(`{"ev":"report","nodeid":"test_outputs.py::test_value","when":"call","outcome":"failed"}`),
		src.Line(`{"ev":"session-finish","pid":7,"exitstatus":1}`),
	}
	as := []Assertion{{Name: "test_outputs.py::test_load", Status: StatusPassed}, {Name: "test_outputs.py::test_value", Status: StatusFailed}}
	for _, n := range []string{"test_forged_0", "test_forged_1"} {
		lines = append(lines, `{"ev":"report","nodeid":"test_outputs.py::`+n+`","when":"call","outcome":"passed"}`)
		as = append(as, Assertion{Name: "test_outputs.py::" + n, Status: StatusPassed})
	}
	b := strings.Join(lines, "\n") + "\n"
	ch := sandbox.ParseRunnerChannelKeyed([]byte(b), int64(len(b)), key)
	f := RunnerDisagrees(results("ctrf", as...), ch)
	kinds := map[string]int{}
	for _, x := range f {
		kinds[x.Kind]++
	}
	if kinds["forged"] != 1 || kinds["disagrees"] != 2 {
		t.Errorf("forged passes: %v", f)
	}
}
