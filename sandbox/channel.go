package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// ToolchainChannelFD is the descriptor test.sh inherits that leads to the
// verifier exec's standard output, read by the host: the sealed Python's
// guard (sitecustomize) takes it, and it and the t1flow_mark pytest plugin
// report there what the runner saw. Nothing in the sandbox's filesystem
// holds what is written there, and a line once written cannot be taken
// back: what the agent's code can still do is add lines, never remove the
// runner's.
const ToolchainChannelFD = 61

// RunnerChannel is what the runner reported over the channel.
type RunnerChannel struct {
	Sessions     int   // pytest sessions that started under the plugin
	ExitStatuses []int // of those that finished
	// Tests by nodeid: passed when pytest's report of the call said so and
	// no phase failed and the test function did not raise.
	Tests map[string]*RunnerTest
	// Evidence is what the guard and the plugin caught.
	Evidence []TamperFinding
	Bytes    int64 // channel bytes seen, including any the cap dropped
	Overflow bool  // more than the host kept
}

// RunnerTest is one test as the runner reported it.
type RunnerTest struct {
	CallPassed bool // the call phase's report said passed
	Failed     bool // a phase failed, or the function raised
}

// Passed is whether the runner saw the test pass.
func (t *RunnerTest) Passed() bool { return t.CallPassed && !t.Failed }

type channelLine struct {
	Ev         string `json:"ev"`
	NodeID     string `json:"nodeid"`
	When       string `json:"when"`
	Outcome    string `json:"outcome"`
	Raised     bool   `json:"raised"`
	ExitStatus *int   `json:"exitstatus"`
	What       string `json:"what"`
	Detail     string `json:"detail"`
	Where      string `json:"where"`
	PID        int    `json:"pid"`
}

// ParseRunnerChannel reads the exec's standard output after the ready line
// (ToolchainRunCmd). Lines that are not the runner's JSON are ignored (the
// agent's code can write there too; only what makes the verdict worse is
// believed: a failure from any line stands).
func ParseRunnerChannel(out []byte, total int64) RunnerChannel {
	ch := RunnerChannel{Tests: map[string]*RunnerTest{}, Bytes: total, Overflow: total > int64(len(out))}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l channelLine
		if b := sc.Bytes(); len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &l) != nil {
			continue
		}
		test := func() *RunnerTest {
			t := ch.Tests[l.NodeID]
			if t == nil {
				t = &RunnerTest{}
				ch.Tests[l.NodeID] = t
			}
			return t
		}
		switch l.Ev {
		case "session-start":
			ch.Sessions++
		case "session-finish":
			if l.ExitStatus != nil {
				ch.ExitStatuses = append(ch.ExitStatuses, *l.ExitStatus)
			}
		case "call":
			if l.Raised {
				test().Failed = true
			}
		case "report":
			t := test()
			switch {
			case l.Outcome == "failed":
				t.Failed = true
			case l.When == "call" && l.Outcome == "passed":
				t.CallPassed = true
			}
		case "audit", "patched":
			where := l.Where
			if where == "" {
				where = "pid " + strconv.Itoa(l.PID)
			}
			ch.Evidence = append(ch.Evidence, TamperFinding{Path: where, Kind: "runtime", Reason: strings.TrimSpace(l.What + ": " + l.Detail)})
		}
	}
	return ch
}

// ResultName is the name a result file gives the test with this pytest
// nodeid: CTRF's is the nodeid without parameters
// ("tests/test_outputs.py::test_x"), JUnit's (as ParseResults joins it) the
// classname, the module path dotted, and the name ("tests.test_outputs::test_x[1]").
func ResultName(format, nodeid string) string {
	switch format {
	case "ctrf":
		name, _, _ := strings.Cut(nodeid, "[")
		return name
	case "junit":
		parts := strings.Split(nodeid, "::")
		if len(parts) < 2 {
			return nodeid
		}
		mod := strings.ReplaceAll(strings.TrimSuffix(parts[0], ".py"), "/", ".")
		return strings.Join(append([]string{mod}, parts[1:len(parts)-1]...), ".") + "::" + parts[len(parts)-1]
	}
	return nodeid
}

// PassedAs counts the tests the runner saw pass by the name a result file
// of this format gives them.
func (ch RunnerChannel) PassedAs(format string) map[string]int {
	n := map[string]int{}
	for id, t := range ch.Tests {
		if t.Passed() {
			n[ResultName(format, id)]++
		}
	}
	return n
}
