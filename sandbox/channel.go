package sandbox

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// ToolchainChannelFD is the descriptor test.sh inherits that leads to the
// verifier exec's standard output, read by the host: the sealed Python's
// guard (sitecustomize) takes it, and it and the t1flow_mark pytest plugin
// report there what the runner saw. Nothing in the sandbox's filesystem
// holds what is written there. Every process that holds the descriptor (test.sh's
// bash and what it runs) can write there too, and any process of the same
// user can open it again through /proc/<pid>/fd of a process that holds it:
// so the plugin authenticates its lines (ChannelKey), and the host believes a
// runner's event only from a line it authenticated.
const ToolchainChannelFD = 61

// ChannelKeyEnv names the variable that hands the t1flow_mark plugin the
// host's share of one verification's channel keys (ChannelKey.Env). It is
// public: what keeps a line from being forged is the runner's own secret.
// The name stays clear of the prefixes ToolchainVerifyCmd drops.
const ChannelKeyEnv = "T1VERIFY_CHANNEL_KEY"

// channelP is the prime of RFC 3526's 2048-bit MODP group (group 14, a safe
// prime; generator 2), which the plugin uses too.
var channelP, _ = new(big.Int).SetString("FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"+
	"EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"+
	"EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"+
	"83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"+
	"E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA0510"+
	"15728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)

// ChannelKey is the host's half of one verification's channel keys. Each
// runner process (a sealed pytest: the t1flow_mark plugin) draws a secret
// of its own, sends its public share in its first line ("hello") and MACs
// every line it writes with the key both sides derive by Diffie-Hellman
// (HMAC-SHA256 of the line and its sequence number): only that process and
// the host know it. A line that claims a runner's source and does not
// authenticate, a sequence number seen twice or missing (a line someone else
// read out of the channel), and a runner's event on a line with no
// authentication are forgeries (RunnerChannel.Evidence).
//
// What it does not stop: code that runs inside a runner process (the
// solution module the tests import) can use the process's own key, as it
// can do anything the runner does; and a process that reaches the channel
// can start a source of its own (a whole pytest session of its own tests),
// as the host's share is public. That needs the channel kept from every
// process but the runners (docs/verification.md).
type ChannelKey struct {
	priv, pub *big.Int
}

// NewChannelKey draws a fresh key for one verification.
func NewChannelKey() (*ChannelKey, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	priv := new(big.Int).SetBytes(b)
	if priv.Sign() == 0 {
		return nil, errors.New("channel key: zero secret")
	}
	return &ChannelKey{priv: priv, pub: new(big.Int).Exp(big.NewInt(2), priv, channelP)}, nil
}

// Public is the host's share, 512 hex digits.
func (k *ChannelKey) Public() string { return fmt.Sprintf("%0512x", k.pub) }

// Env is the KEY=VALUE that hands the runner Public (ChannelKeyEnv).
func (k *ChannelKey) Env() string { return ChannelKeyEnv + "=" + k.Public() }

// channelShare parses a share (the host's or a runner's) and refuses the
// degenerate ones (0, 1, p-1 and anything out of the group).
func channelShare(s string) (*big.Int, bool) {
	if len(s) != 512 {
		return nil, false
	}
	x, ok := new(big.Int).SetString(s, 16)
	if !ok || x.Cmp(big.NewInt(1)) <= 0 || x.Cmp(new(big.Int).Sub(channelP, big.NewInt(1))) >= 0 {
		return nil, false
	}
	return x, true
}

// channelKeys derives a source's MAC key and its id from the shared secret s
// and the runner's share r.
func channelKeys(s, r *big.Int) (mac []byte, id string) {
	rb := r.FillBytes(make([]byte, 256))
	h := sha256.New()
	h.Write([]byte("t1flow-channel-v1"))
	h.Write(s.FillBytes(make([]byte, 256)))
	h.Write(rb)
	sum := sha256.Sum256(rb)
	return h.Sum(nil), hex.EncodeToString(sum[:8])
}

// source is a runner's share as the host sees it: its MAC key and id.
func (k *ChannelKey) source(share string) (mac []byte, id string, ok bool) {
	r, ok := channelShare(share)
	if !ok {
		return nil, "", false
	}
	mac, id = channelKeys(new(big.Int).Exp(r, k.priv, channelP), r)
	return mac, id, true
}

// channelMAC is what a line's "m" holds: HMAC-SHA256 of everything before
// it, the first 16 bytes, in hex.
func channelMAC(key []byte, body string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// channelMACSep starts a line's MAC: the line is body + channelMACSep + mac + `"}`.
const channelMACSep = `,"m":"`

// channelSigned splits an authenticated line into what its MAC covers and
// the MAC.
func channelSigned(line string) (body, mac string, ok bool) {
	i := strings.LastIndex(line, channelMACSep)
	if i < 0 || !strings.HasSuffix(line, `"}`) {
		return "", "", false
	}
	mac = line[i+len(channelMACSep) : len(line)-2]
	return line[:i], mac, len(mac) == 32
}

// ChannelSource is a runner's side of the channel, as the t1flow_mark plugin
// writes it (for tests, and for tools that replay a runner).
type ChannelSource struct {
	key []byte
	id  string
	n   int
}

// NewChannelSource draws a runner's secret against the host's share
// (ChannelKey.Public) and returns the source and its hello line.
func NewChannelSource(hostShare string, pid int) (*ChannelSource, string, error) {
	h, ok := channelShare(hostShare)
	if !ok {
		return nil, "", errors.New("channel source: not a host share")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, "", err
	}
	x := new(big.Int).SetBytes(b)
	r := new(big.Int).Exp(big.NewInt(2), x, channelP)
	mac, id := channelKeys(new(big.Int).Exp(h, x, channelP), r)
	s := &ChannelSource{key: mac, id: id}
	return s, s.Line(fmt.Sprintf(`{"ev":"hello","pid":%d,"dh":"%0512x"}`, pid, r)), nil
}

// Line authenticates one JSON object line ({...}): its source, its sequence
// number and its MAC added.
func (s *ChannelSource) Line(obj string) string {
	body := fmt.Sprintf(`%s,"src":"%s","n":%d`, strings.TrimSuffix(obj, "}"), s.id, s.n)
	s.n++
	return body + channelMACSep + channelMAC(s.key, body) + `"}`
}

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
	type line struct {
		raw string
		l   channelLine
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l channelLine
		if b := sc.Bytes(); len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &l) != nil {
			continue
		}
		lines = append(lines, line{sc.Text(), l})
	}
	// The runners' sources, from their hellos.
	sources := map[string]*channelSource{}
	if key != nil {
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
	}
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
	test := func(id string) *RunnerTest {
		t := ch.Tests[id]
		if t == nil {
			t = &RunnerTest{}
			ch.Tests[id] = t
		}
		return t
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
		case "audit", "patched":
			where := l.Where
			if where == "" {
				where = "pid " + strconv.Itoa(l.PID)
			}
			ch.Evidence = append(ch.Evidence, TamperFinding{Path: where, Kind: "runtime", Reason: strings.TrimSpace(l.What + ": " + l.Detail)})
		}
	}
	if nForged > 0 {
		ch.Evidence = append(ch.Evidence, TamperFinding{Path: "runner channel", Kind: "forged",
			Reason: fmt.Sprintf("%d lines on the runner's channel that no runner wrote; %s", nForged, strings.Join(forged, "; "))})
	}
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
	return ch
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
