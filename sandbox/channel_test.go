package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

func parseKeyed(key *sandbox.ChannelKey, lines ...string) sandbox.RunnerChannel {
	b := strings.Join(lines, "\n") + "\n"
	return sandbox.ParseRunnerChannelKeyed([]byte(b), int64(len(b)), key)
}

func newKey(t *testing.T) *sandbox.ChannelKey {
	t.Helper()
	k, err := sandbox.NewChannelKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// run is one honest pytest session: its hello and lines, authenticated.
func run(t *testing.T, key *sandbox.ChannelKey, pid int) (*sandbox.ChannelSource, []string) {
	t.Helper()
	src, hello, err := sandbox.NewChannelSource(key.Public(), pid)
	if err != nil {
		t.Fatal(err)
	}
	return src, []string{
		`{"ev":"guard","pid":7,"landlock":7}`, // the guard's own line: plain, and no runner's event
		hello,
		src.Line(`{"ev":"session-start","pid":7}`),
		src.Line(`{"ev":"call","nodeid":"test_outputs.py::test_a","raised":false}`),
		src.Line(`{"ev":"report","nodeid":"test_outputs.py::test_a","when":"call","outcome":"passed"}`),
		src.Line(`{"ev":"call","nodeid":"test_outputs.py::test_b","raised":true}`),
		src.Line(`{"ev":"report","nodeid":"test_outputs.py::test_b","when":"call","outcome":"failed"}`),
		src.Line(`{"ev":"session-finish","pid":7,"exitstatus":1}`),
	}
}

func forgedFindings(ch sandbox.RunnerChannel) []string {
	var out []string
	for _, f := range ch.Evidence {
		if f.Kind == "forged" {
			out = append(out, f.Reason)
		}
	}
	return out
}

func TestRunnerChannelAuthenticated(t *testing.T) {
	key := newKey(t)
	_, lines := run(t, key, 7)
	ch := parseKeyed(key, lines...)
	if ch.Sources != 1 || ch.Sessions != 1 || len(ch.ExitStatuses) != 1 || len(ch.Evidence) != 0 || ch.Unauthenticated {
		t.Fatalf("an honest run: %+v", ch)
	}
	if !ch.Tests["test_outputs.py::test_a"].Passed() || !ch.Tests["test_outputs.py::test_b"].Fails() {
		t.Fatalf("tests: %+v %+v", ch.Tests["test_outputs.py::test_a"], ch.Tests["test_outputs.py::test_b"])
	}
	if why := ch.Unresolved(); !strings.Contains(why, "exited [1]") || !strings.Contains(why, "test_b") {
		t.Errorf("unresolved: %q", why)
	}

	// Plain lines in the runner's form, as a process that holds the channel
	// (one test.sh starts, code inside pytest) writes them: not believed,
	// and evidence.
	forged := append(append([]string{}, lines...),
		`{"ev":"report","nodeid":"test_outputs.py::test_b","when":"call","outcome":"passed"}`,
		`{"ev":"report","nodeid":"test_outputs.py::test_forged_0","when":"call","outcome":"passed"}`,
		`{"ev":"session-start","pid":9}`, `{"ev":"session-finish","pid":9,"exitstatus":0}`)
	ch = parseKeyed(key, forged...)
	if f := forgedFindings(ch); len(f) != 1 || !strings.Contains(f[0], "4 lines") {
		t.Errorf("plain lines: %v", f)
	}
	if ch.Tests["test_outputs.py::test_forged_0"] != nil || ch.Tests["test_outputs.py::test_b"].CallPassed || ch.Sessions != 1 {
		t.Errorf("a plain line was believed: %+v", ch)
	}

	// A line in the runner's name with its MAC wrong, or a line of the
	// runner's copied again.
	bad := strings.Replace(lines[4], `"outcome":"passed"`, `"outcome":"passed" `, 1)
	for name, extra := range map[string]string{"bad mac": bad, "replay": lines[4]} {
		ch := parseKeyed(key, append(append([]string{}, lines...), extra)...)
		if f := forgedFindings(ch); len(f) != 1 {
			t.Errorf("%s: %v", name, f)
		}
	}
	// A runner's line taken off the channel (read by someone else): its
	// session still finished, but the gap shows.
	dropped := append(append([]string{}, lines[:6]...), lines[7:]...)
	if f := forgedFindings(parseKeyed(key, dropped...)); len(f) != 1 || !strings.Contains(f[0], "never reached the host") {
		t.Errorf("a dropped line: %v", f)
	}
	// Another verification's key: the runner's lines are not this host's.
	other := newKey(t)
	if ch := parseKeyed(other, lines...); ch.Sources != 0 || !ch.Unauthenticated {
		t.Errorf("another key: %+v", ch)
	}
	// The order lines arrive in does not matter (threads); a second
	// process is a source of its own.
	src2, more := run(t, key, 8)
	_ = src2
	mixed := append(append([]string{}, more[1:]...), lines[1:]...)
	if ch := parseKeyed(key, mixed...); ch.Sources != 2 || ch.Sessions != 2 || len(ch.Evidence) != 0 {
		t.Errorf("two runners: %+v", ch)
	}
}

// TestRunnerChannelUnkeyed: with no key (and with a key but no
// authenticated line at all: a toolchain from before), lines are believed as
// they come, as before.
func TestRunnerChannelUnkeyed(t *testing.T) {
	lines := []string{`{"ev":"session-start","pid":7}`, `{"ev":"report","nodeid":"t.py::a","when":"call","outcome":"passed"}`, `{"ev":"session-finish","exitstatus":0}`}
	for _, key := range []*sandbox.ChannelKey{nil, newKey(t)} {
		ch := parseKeyed(key, lines...)
		if ch.Sessions != 1 || !ch.Tests["t.py::a"].Passed() || len(ch.Evidence) != 0 || ch.Unauthenticated != (key != nil) {
			t.Errorf("key %v: %+v", key != nil, ch)
		}
	}
}

// TestRunnerChannelUnconfined: a guard that could not confine its
// process to a Landlock domain says why; one that did, and a guard line from
// before, say nothing.
func TestRunnerChannelUnconfined(t *testing.T) {
	ch := parseKeyed(nil, `{"ev":"guard","pid":7,"landlock":7}`, `{"ev":"guard","pid":8}`,
		`{"ev":"guard","pid":9,"landlock":0,"unconfined":"[Errno 95] landlock_create_ruleset: Operation not supported"}`)
	if len(ch.Unconfined) != 1 || ch.Unconfined[0] != "pid 9: [Errno 95] landlock_create_ruleset: Operation not supported" || len(ch.Evidence) != 0 {
		t.Errorf("unconfined %q, evidence %v", ch.Unconfined, ch.Evidence)
	}
}

// TestRunnerChannelPluginInterop runs the plugin's own channel writer
// (t1flow_mark._channel, taken from the toolchain's source) under the host's
// Python and reads what it wrote with the host's key.
func TestRunnerChannelPluginInterop(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on the host")
	}
	plugin := filepath.Join(testenv.RepoRoot(), "sandbox/toolchainfs/plugins/t1flow_mark.py")
	key := newKey(t)
	script := `import ast, os, sys
src = open(sys.argv[1]).read()
tree = ast.parse(src)
names = ("_P", "_TRUSTED", "_q", "_vetted", "_channel")
keep = [n for n in tree.body if getattr(n, "name", "") in names or isinstance(n, ast.Assign) and any(getattr(t, "id", "") in names for t in n.targets)]
ns = {"os": os, "sys": sys}
exec(compile(ast.Module(body=keep, type_ignores=[]), sys.argv[1], "exec"), ns)
emit = ns["_channel"](1, ns["_vetted"])
emit('{"ev":"session-start","pid":%d}' % os.getpid())
emit('{"ev":"report","nodeid":"test_outputs.py::test_\u00e9","when":"call","outcome":"passed"}')
# The agent's module writing a runner's line with the plugin's own writer:
# reported, not written.
g = {}
exec(compile("def forge(emit):\n    emit('{\"ev\":\"report\",\"nodeid\":\"test_outputs.py::test_forged\",\"when\":\"call\",\"outcome\":\"passed\"}')\n", "/app/inventory.py", "exec"), g)
g["forge"](emit)
if os.fork() == 0:
    emit('{"ev":"report","nodeid":"test_outputs.py::test_child","when":"call","outcome":"passed"}')
    os._exit(0)
os.wait()
emit('{"ev":"session-finish","pid":%d,"exitstatus":0}' % os.getpid())
assert "T1VERIFY_CHANNEL_KEY" not in os.environ
`
	cmd := exec.Command(py, "-c", script, plugin)
	cmd.Env = append(os.Environ(), key.Env(), "T1FLOW_TRUSTED_CODE="+filepath.Dir(plugin))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v: %s", err, out)
	}
	ch := sandbox.ParseRunnerChannelKeyed(out, int64(len(out)), key)
	if ch.Sources != 2 || ch.Sessions != 1 || len(ch.ExitStatuses) != 1 || ch.Unauthenticated ||
		ch.Tests["test_outputs.py::test_\u00e9"] == nil || !ch.Tests["test_outputs.py::test_child"].Passed() || ch.Tests["test_outputs.py::test_forged"] != nil {
		t.Fatalf("the plugin's lines, read with the host's key: %+v\n%s", ch, out)
	}
	if len(ch.Evidence) != 1 || ch.Evidence[0].Path != "/app/inventory.py:2" || ch.Evidence[0].Kind != "runtime" {
		t.Errorf("the agent's module writing with the plugin's writer: %v", ch.Evidence)
	}
	// Without the host's share it writes plain lines.
	cmd = exec.Command(py, "-c", script, plugin)
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("python: %v: %s", err, out)
	}
	if strings.Contains(string(out), `"m":`) {
		t.Errorf("plain lines expected: %s", out)
	}
}
