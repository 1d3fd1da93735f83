package sandbox

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ToolchainChannelFD is the descriptor test.sh inherits that leads, through
// the relay (ToolchainRelay), to the verifier exec's standard output, read
// by the host: the sealed Python's guard (sitecustomize) takes it, and it
// and the t1flow_mark pytest plugin report there what the runner saw.
// Nothing in the sandbox's filesystem holds what is written there. Every
// process that holds the descriptor (test.sh's bash and what it runs) can
// write there too: so the plugin authenticates its lines (ChannelKey), and
// the host believes a runner's event only from a line it authenticated. It
// is a socket, so no other process can open it again through
// /proc/<pid>/fd of one that holds it.
const ToolchainChannelFD = 61

// RunnerChannel is what the runner reported over the channel.
type RunnerChannel struct {
	Sessions     int   // pytest sessions that started under the plugin
	ExitStatuses []int // of those that finished
	// Tests by nodeid, as the runner reported them.
	Tests map[string]*RunnerTest
	// Evidence is what the guard and the plugin caught, and the lines on
	// the channel no runner wrote.
	Evidence []TamperFinding
	Bytes    int64 // channel bytes seen, including any the cap dropped
	Overflow bool  // more than the host kept
	// Sources counts the runner processes whose lines the host
	// authenticated. With a key and none, Unauthenticated says the runner's
	// events were believed from plain lines (a toolchain from before the
	// channel was authenticated, or one whose plugin never got the key).
	Sources         int
	Unauthenticated bool
	// Unconfined says, for each guard that took the channel and could not
	// put its process in a Landlock domain ("pid N: why"), that the
	// processes its tests started could reach test.sh's through /proc
	// (docs/verification.md). Informational: the guard's lines are plain.
	Unconfined []string
}

// RunnerTest is one test as the runner reported it.
type RunnerTest struct {
	CallPassed bool // the call phase's report said passed
	Failed     bool // a phase's report said failed
	Raised     bool // the test function raised (an expected failure, xfail, does too)
}

// Passed is whether the runner saw the test pass: its call reported passed,
// no phase failed and the function did not raise.
func (t *RunnerTest) Passed() bool { return t.CallPassed && !t.Failed && !t.Raised }

// Fails is whether the runner saw the test fail: a phase reported failed, or
// the call is reported passed while its function raised (a rewritten
// report). An expected failure (reported skipped) is not one.
func (t *RunnerTest) Fails() bool { return t.Failed || t.Raised && t.CallPassed }

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
	DH         string `json:"dh"`
	Src        string `json:"src"`
	N          *int   `json:"n"`
	M          string `json:"m"`
	Landlock   *int   `json:"landlock"`
	Unconfined string `json:"unconfined"`
}

// runnerEvent is an event the host believes only from a runner: what the
// verdict is made of.
func runnerEvent(ev string) bool {
	switch ev {
	case "hello", "session-start", "session-finish", "call", "report":
		return true
	}
	return false
}

// channelSource is an authenticated runner process on the host's side.
type channelSource struct {
	key  []byte
	pid  int
	seen map[int]int // sequence number: lines
}

// ParseRunnerChannel reads the exec's standard output after the ready line
// (ToolchainRunCmd) with no key: every line of the runner's form is
// believed, as a toolchain from before the channel was authenticated wrote
// them (ParseRunnerChannelKeyed).
func ParseRunnerChannel(out []byte, total int64) RunnerChannel {
	return ParseRunnerChannelKeyed(out, total, nil)
}

// ParseRunnerChannelKeyed reads the exec's standard output after the ready
// line (ToolchainRunCmd). Lines that are not JSON are ignored. With key (the
// one whose share the verification handed the runner), a runner's events
// (sessions, calls, reports) count only from lines a runner authenticated,
// and the forgeries become Evidence: a runner's event on a plain line, a
// line that claims a runner's source and does not authenticate, a runner's
// line seen twice, and a runner's line that never arrived (a gap in its
// sequence: something else read the channel). With key but no authenticated
// runner at all, and with no key, every line is believed (Unauthenticated
// says so when there was a key). The guard's and plugin's evidence
// (audit, patched) counts from any line: it only makes the verdict worse.
func ParseRunnerChannelKeyed(out []byte, total int64, key *ChannelKey) RunnerChannel {
	ch := RunnerChannel{Tests: map[string]*RunnerTest{}, Bytes: total, Overflow: total > int64(len(out))}
	lines := channelLines(out)
	sources := channelSources(lines, key)
	ch.Sources = len(sources)
	believeAll := len(sources) == 0
	var forged []string
	nForged := 0
	forge := func(why, raw string) {
		nForged++
		if len(forged) < 3 {
			if len(raw) > 160 {
				raw = raw[:160] + "..."
			}
			forged = append(forged, why+": "+raw)
		}
	}
	for _, ln := range lines {
		l := ln.l
		authentic := false
		if src := sources[l.Src]; src != nil && l.N != nil {
			body, m, signed := channelSigned(ln.raw)
			switch {
			case !signed || !hmac.Equal([]byte(m), []byte(channelMAC(src.key, body))):
				forge("a line in runner pid "+strconv.Itoa(src.pid)+"'s name that does not authenticate", ln.raw)
				continue
			case src.seen[*l.N] > 0:
				src.seen[*l.N]++
				forge("runner pid "+strconv.Itoa(src.pid)+"'s line "+strconv.Itoa(*l.N)+" again", ln.raw)
				continue
			}
			src.seen[*l.N]++
			authentic = true
		}
		if runnerEvent(l.Ev) && !authentic && !believeAll {
			forge("a runner's event no runner wrote", ln.raw)
			continue
		}
		if runnerEvent(l.Ev) && !authentic && key != nil {
			ch.Unauthenticated = true
		}
		ch.apply(l)
	}
	if nForged > 0 {
		ch.Evidence = append(ch.Evidence, TamperFinding{Path: "runner channel", Kind: "forged",
			Reason: fmt.Sprintf("%d lines on the runner's channel that no runner wrote; %s", nForged, strings.Join(forged, "; "))})
	}
	ch.missingLines(sources)
	return ch
}

// rawLine is a channel line as it came and as parsed.
type rawLine struct {
	raw string
	l   channelLine
}

// channelLines are the channel's JSON lines; others are ignored.
func channelLines(out []byte) []rawLine {
	var lines []rawLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l channelLine
		if b := sc.Bytes(); len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &l) != nil {
			continue
		}
		lines = append(lines, rawLine{sc.Text(), l})
	}
	return lines
}

// channelSources are the runners that authenticated a hello under key.
func channelSources(lines []rawLine, key *ChannelKey) map[string]*channelSource {
	sources := map[string]*channelSource{}
	if key == nil {
		return sources
	}
	for _, ln := range lines {
		l := ln.l
		if l.Ev != "hello" || l.N == nil || *l.N != 0 || sources[l.Src] != nil {
			continue
		}
		mac, id, ok := key.source(l.DH)
		body, m, signed := channelSigned(ln.raw)
		if !ok || !signed || id != l.Src || !hmac.Equal([]byte(m), []byte(channelMAC(mac, body))) {
			continue
		}
		sources[id] = &channelSource{key: mac, pid: l.PID, seen: map[int]int{}}
	}
	return sources
}

// apply counts one believed line.
func (ch *RunnerChannel) apply(l channelLine) {
	test := func(id string) *RunnerTest {
		t := ch.Tests[id]
		if t == nil {
			t = &RunnerTest{}
			ch.Tests[id] = t
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
			test(l.NodeID).Raised = true
		}
	case "report":
		t := test(l.NodeID)
		switch {
		case l.Outcome == "failed":
			t.Failed = true
		case l.When == "call" && l.Outcome == "passed":
			t.CallPassed = true
		}
	case "guard":
		if l.Landlock != nil && *l.Landlock == 0 {
			ch.Unconfined = append(ch.Unconfined, "pid "+strconv.Itoa(l.PID)+": "+l.Unconfined)
		}
	case "audit", "patched":
		where := l.Where
		if where == "" {
			where = "pid " + strconv.Itoa(l.PID)
		}
		ch.Evidence = append(ch.Evidence, TamperFinding{Path: where, Kind: "runtime", Reason: strings.TrimSpace(l.What + ": " + l.Detail)})
	}
}

// missingLines is evidence for each source whose sequence has a gap: a line
// of its that never reached the host (something else read the channel).
func (ch *RunnerChannel) missingLines(sources map[string]*channelSource) {
	ids := make([]string, 0, len(sources))
	for id := range sources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		src := sources[id]
		last := -1
		for n := range src.seen {
			last = max(last, n)
		}
		if missing := last + 1 - len(src.seen); missing > 0 && !ch.Overflow {
			ch.Evidence = append(ch.Evidence, TamperFinding{Path: "runner channel", Kind: "forged",
				Reason: fmt.Sprintf("%d of runner pid %d's first %d lines never reached the host: something else read the channel", missing, src.pid, last+1)})
		}
	}
}

// Unfinished counts the sessions that started and never reported their end.
func (ch RunnerChannel) Unfinished() int { return max(ch.Sessions-len(ch.ExitStatuses), 0) }

// Unresolved says why the runner did not see the task resolved ("" when
// it did): a session that never finished, one that exited other than 0, or
// a test it saw fail.
func (ch RunnerChannel) Unresolved() string {
	var why []string
	if n := ch.Unfinished(); n > 0 {
		why = append(why, fmt.Sprintf("%d of its %d pytest sessions never finished", n, ch.Sessions))
	}
	for _, s := range ch.ExitStatuses {
		if s != 0 {
			why = append(why, fmt.Sprintf("its sessions exited %v", ch.ExitStatuses))
			break
		}
	}
	var failed []string
	for id, t := range ch.Tests {
		if t.Fails() {
			failed = append(failed, id)
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		more := ""
		if len(failed) > 5 {
			failed, more = failed[:5], ", ..."
		}
		why = append(why, fmt.Sprintf("it saw %d tests fail (%s%s)", len(failed), strings.Join(failed, ", "), more))
	}
	if len(why) == 0 {
		return ""
	}
	return "the runner did not resolve it: " + strings.Join(why, "; ")
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

// FailedAs lists, sorted, the tests the runner saw fail by the name a
// result file of this format gives them, once per test.
func (ch RunnerChannel) FailedAs(format string) []string {
	var out []string
	for id, t := range ch.Tests {
		if t.Fails() {
			out = append(out, ResultName(format, id))
		}
	}
	sort.Strings(out)
	return out
}
