package activities_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/errdefs"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/steptime"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

// liveTask is a Harbor-format task whose solve.sh starts an HTTP server in
// the background and whose tests (TB2's test.sh, pytest) query it on
// 127.0.0.1:8000: Harbor runs them beside the server.
const liveTask = "examples/harbor-proof/service-from-solution"

// liveRig is one sandbox of liveTask, the way a rollout makes it, and the
// activities that verify it.
type liveRig struct {
	t    *testing.T
	d    *sandbox.Docker
	a    *activities.Activities
	tk   *task.Task
	ref  task.Ref
	id   string
	name string
}

func newLiveRig(t *testing.T) *liveRig {
	d := testenv.Docker(t)
	sb := testenv.StartTaskSandbox(t, d, filepath.Join(testenv.RepoRoot(), liveTask), "live")
	tk, st, ref, id, name := sb.Task, sb.Store, sb.Ref, sb.ID, sb.Name
	return &liveRig{t: t, d: d, a: &activities.Activities{Docker: d, Store: st, TaskCache: t.TempDir()}, tk: tk, ref: ref, id: id, name: name}
}

// agent runs script in the sandbox as an agent's command would.
func (r *liveRig) agent(script string) string {
	r.t.Helper()
	res, err := r.d.Exec(context.Background(), r.id, script, sandbox.ExecOptions{Timeout: 2 * time.Minute, User: "root", WorkDir: "/app"})
	if err != nil || res.ExitCode != 0 {
		r.t.Fatalf("agent command: exit %d, %v: %s", res.ExitCode, err, res.Output)
	}
	return res.Output
}

// oracle copies the task's solution in and runs solve.sh, then then.
func (r *liveRig) oracle(then string) {
	r.t.Helper()
	sol, err := task.TarBytes(r.tk.Dir, "solution", "solution/")
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.d.CopyIn(context.Background(), r.id, "/", sol); err != nil {
		r.t.Fatal(err)
	}
	r.agent("bash /solution/solve.sh" + then)
}

func (r *liveRig) verify() activities.VerifyResult {
	r.t.Helper()
	start := time.Now()
	clock := &steptime.Clock{}
	vr, err := r.a.Verify(steptime.With(context.Background(), clock), activities.VerifyInput{
		Sandbox: activities.Sandbox{ContainerID: r.id, Name: r.name}, Task: r.ref, RolloutID: r.name,
	})
	if err != nil {
		r.t.Fatalf("verify: %v", err)
	}
	var steps []string
	for _, s := range clock.Steps() {
		steps = append(steps, fmt.Sprintf("%s %s", s.Name, s.D.Round(time.Millisecond)))
	}
	r.t.Logf("verified in %s (%s): %d/%d passed, resolved %v, reward %v, serving %d, tampered %v\n%s",
		time.Since(start).Round(time.Millisecond), strings.Join(steps, ", "), vr.Passed, vr.Total, vr.Resolved, rewardOf(vr), vr.LiveService, vr.Tampered, vr.Preview)
	return vr
}

// leftNothing fails unless the live verifier's container and snapshot are gone.
func (r *liveRig) leftNothing() {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.d.Client.ContainerInspect(ctx, sandbox.LiveVerifierName(r.id)); !errdefs.IsNotFound(err) {
		r.t.Errorf("the live verifier's container is still there (%v)", err)
	}
	if _, err := r.d.Client.ImageInspect(ctx, "t1flow-verify:"+r.id); !errdefs.IsNotFound(err) {
		r.t.Errorf("the live verifier's snapshot is still there (%v)", err)
	}
}

func rewardOf(vr activities.VerifyResult) any {
	if vr.Reward == nil {
		return nil
	}
	return *vr.Reward
}

// TestVerifyKeepsTheServiceTheSolutionStarted: the oracle of a task whose
// solve.sh starts a server the tests query resolves, as under Harbor; the
// server still serves the sandbox afterwards, and nothing of the live
// verifier is left.
func TestVerifyKeepsTheServiceTheSolutionStarted(t *testing.T) {
	r := newLiveRig(t)
	r.oracle("")
	vr := r.verify()
	if !vr.Resolved || vr.Passed != 3 || vr.Total != 3 || len(vr.Tampered) != 0 {
		t.Fatalf("the oracle: resolved %v, %d/%d passed, tampered %v, want resolved 3/3", vr.Resolved, vr.Passed, vr.Total, vr.Tampered)
	}
	if vr.LiveService == 0 {
		t.Errorf("verified without seeing the service")
	}
	if out := r.agent(sandbox.ToolchainMount + "/bin/curl -sS http://127.0.0.1:8000/health"); out != "ok" {
		t.Errorf("the server after verification answers %q", out)
	}
	r.leftNothing()
}

// liveAdversary is an agent that solves nothing and leaves a process running
// that serves wrong answers on the tests' port (so the verifier runs beside
// it) and, all through verification, kills every process that looks like
// the verifier's test runner (named uv*, python*, pytest*) and writes the results a pass
// would leave: reward.txt 1, the runner's mark, no CTRF. Beside tests run in
// the sandbox itself, it resolves the task (test.sh's own reward.txt is
// overwritten, and no pytest session reaches the runner's channel to
// contradict it).
const liveAdversary = `cat > /tmp/adversary.py <<'PY'
import http.server, os, signal, threading, time

class Wrong(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok" if self.path == "/health" else b"41")
    def log_message(self, *args):
        pass

threading.Thread(target=http.server.HTTPServer(("127.0.0.1", 8000), Wrong).serve_forever, daemon=True).start()
me, n = os.getpid(), 0
while True:
    n += 1
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in (1, me):
            continue
        try:
            comm = open("/proc/%s/comm" % p).read().strip()
        except OSError:
            continue
        if comm.startswith(("uv", "python", "pytest")):
            try:
                os.kill(int(p), signal.SIGKILL)
                open("/tmp/adversary.killed", "a").write(p + "\n")
            except OSError:
                pass
    for d, f, body in (("/logs/verifier", "reward.txt", "1\n"), ("/tmp/.t1flow-verify", "runner-started", "")):
        try:
            os.makedirs(d, exist_ok=True)
            open(os.path.join(d, f), "w").write(body)
        except OSError:
            pass
    try:
        os.remove("/logs/verifier/ctrf.json")
    except OSError:
        pass
    open("/tmp/adversary.rounds", "w").write(str(n))
    time.sleep(0.002)
PY
setsid nohup python3 /tmp/adversary.py >/dev/null 2>&1 </dev/null &
for i in $(seq 100); do ` + sandbox.ToolchainMount + `/bin/curl -sf http://127.0.0.1:8000/health && exit 0; sleep 0.1; done
` + sandbox.ToolchainMount + `/bin/curl -sS http://127.0.0.1:8000/health`

// TestLiveVerifierIgnoresTheAgentsProcesses: the adversary above runs beside
// the live verifier for the whole verification (its round counter moves on)
// and the run stays unresolved, scored on what its wrong server answers.
func TestLiveVerifierIgnoresTheAgentsProcesses(t *testing.T) {
	r := newLiveRig(t)
	if out := r.agent(liveAdversary); out != "ok" {
		t.Fatalf("the adversary's server answers %q", out)
	}
	rounds := func() string {
		return strings.TrimSpace(r.agent(sandbox.ToolchainMount + "/bin/cat /tmp/adversary.rounds"))
	}
	before := rounds()
	vr := r.verify()
	after := rounds()
	if before == after {
		t.Fatalf("the adversary did not run during verification (round %s before and after)", after)
	}
	if vr.LiveService == 0 {
		t.Fatalf("verified without seeing the adversary's server: the kill-first path, not the live one")
	}
	if vr.Resolved || vr.Passed >= vr.Total || vr.Format != "ctrf" || len(vr.Tampered) != 0 {
		t.Fatalf("the adversary reached the verdict: resolved %v, %d/%d from %q, tampered %v", vr.Resolved, vr.Passed, vr.Total, vr.Format, vr.Tampered)
	}
	// The wrong server is what was judged: /health passes, /sum does not,
	// and /app/server.py was never written.
	if vr.Passed != 1 || vr.Total != 3 {
		t.Errorf("%d/%d passed, want 1/3 (health only)", vr.Passed, vr.Total)
	}
	r.leftNothing()
}

// TestLiveVerifierRefusesAFakeInstaller: examples/cheats/fake-installer.sh
// leaves a TLS server for astral.sh, trusted by the sandbox's CA store, whose
// "installer" (TB2's test.sh pipes it into sh) writes reward.txt 1 and the
// runner's mark and kills test.sh. Its server makes the verification live,
// and the toolchain's curl refuses its certificate: unresolved, 0/3. With
// the toolchain's home/.curlrc gone, the installer runs in the verifier and
// the task resolves 1/1 from reward.txt.
func TestLiveVerifierRefusesAFakeInstaller(t *testing.T) {
	r := newLiveRig(t)
	script, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "examples/cheats/fake-installer.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if out := r.agent(string(script)); !strings.Contains(out, "planted") {
		t.Fatalf("planting: %s", out)
	}
	vr := r.verify()
	if vr.LiveService == 0 {
		t.Fatalf("verified without seeing the fake installer's server: the kill-first path, not the live one")
	}
	if vr.Resolved || vr.Passed != 0 || vr.Total != 3 || vr.Format != "ctrf" {
		t.Fatalf("the fake installer reached the verdict: resolved %v, %d/%d from %q", vr.Resolved, vr.Passed, vr.Total, vr.Format)
	}
	r.leftNothing()
}

// TestVerifyStopsAgentProcessesWhenNothingServes: an agent that leaves a
// process serving no socket is verified the old way, its process killed
// first, in the sandbox itself (the cost to compare with the live path's).
func TestVerifyStopsAgentProcessesWhenNothingServes(t *testing.T) {
	r := newLiveRig(t)
	r.agent("setsid nohup sleep 1234 >/dev/null 2>&1 </dev/null & echo started")
	vr := r.verify()
	if vr.LiveService != 0 || vr.Resolved || vr.Passed != 0 || vr.Total != 3 {
		t.Fatalf("serving %d, resolved %v, %d/%d passed; want the kill-first path, 0/3", vr.LiveService, vr.Resolved, vr.Passed, vr.Total)
	}
	// (the pattern does not match its own command line; the keepalive's
	// sleep 86400 is PID 1's, which no kill reaches)
	if out := r.agent(sandbox.ToolchainMount + "/bin/grep -la '^sleep.123[4]' /proc/[0-9]*/cmdline 2>/dev/null; true"); strings.TrimSpace(out) != "" {
		t.Errorf("the agent's sleep survived verification: %s", out)
	}
	if _, err := r.d.Client.ContainerInspect(context.Background(), sandbox.LiveVerifierName(r.id)); !errdefs.IsNotFound(err) {
		t.Errorf("a live verifier was made (%v)", err)
	}
}

// TestLiveVerifierRefusesALargeLayer: a sandbox that wrote more than
// sandbox.LiveVerifierMaxMB (lowered to 16 here) is verified kill-first even
// with a service running: its snapshot would cost the host that much disk
// again. The oracle's server is stopped with it (1/3), and the record says why.
func TestLiveVerifierRefusesALargeLayer(t *testing.T) {
	old := sandbox.LiveVerifierMaxMB
	sandbox.LiveVerifierMaxMB = 16
	t.Cleanup(func() { sandbox.LiveVerifierMaxMB = old })
	r := newLiveRig(t)
	r.oracle(" && head -c 40000000 /dev/urandom > /app/blob && sync")
	vr := r.verify()
	if vr.LiveService != 0 || !strings.Contains(vr.LiveRefused, "over the 16 MB") || vr.Passed != 1 || vr.Total != 3 {
		t.Fatalf("serving %d (%q), %d/%d passed; want the kill-first path at 1/3", vr.LiveService, vr.LiveRefused, vr.Passed, vr.Total)
	}
	r.leftNothing()
}

// TestLiveVerifierOutlastsAForkBomb: the oracle's server with a fork bomb
// left beside it. The bomb fills the sandbox's pids limit and CPU share, not
// the verifier's: the verification ends, scored, well within its timeout
// (an exec into the full sandbox may fail to start, an infrastructure error
// the workflow retries: so here, up to three attempts). When the survey's
// exec never started in all its tries, the sandbox is verified kill-first
// and the record says so (LiveRefused).
func TestLiveVerifierOutlastsAForkBomb(t *testing.T) {
	r := newLiveRig(t)
	r.oracle(" && (bash -c ':(){ :|:& };:' >/dev/null 2>&1 &) ; sleep 3")
	// The sandbox's process count, from its pids cgroup on this host (v1 or v2).
	pids := func() int {
		for _, p := range []string{"/sys/fs/cgroup/pids/docker/" + r.id + "/pids.current", "/sys/fs/cgroup/system.slice/docker-" + r.id + ".scope/pids.current"} {
			if b, err := os.ReadFile(p); err == nil {
				n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				return n
			}
		}
		return -1
	}
	before := pids()
	start := time.Now()
	var vr activities.VerifyResult
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		vr, err = r.a.Verify(context.Background(), activities.VerifyInput{
			Sandbox: activities.Sandbox{ContainerID: r.id, Name: r.name}, Task: r.ref, RolloutID: r.name,
		})
		t.Logf("attempt %d after %s: %d/%d passed, serving %d (%q), %v", attempt, time.Since(start).Round(time.Millisecond), vr.Passed, vr.Total, vr.LiveService, vr.LiveRefused, err)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("verification never ended scored: %v", err)
	}
	if vr.Total != 3 || len(vr.Tampered) != 0 {
		t.Fatalf("%d/%d, tampered %v", vr.Passed, vr.Total, vr.Tampered)
	}
	if took := time.Since(start); took > 3*time.Minute {
		t.Errorf("took %s", took)
	}
	after := pids()
	t.Logf("sandbox processes: %d before verification, %d after (pids limit %d)", before, after, r.tk.Config.Pids)
	if before >= 0 && before < 100 {
		t.Errorf("the fork bomb was not running: %d processes before verification", before)
	}
	switch {
	case vr.LiveService > 0:
		// The live path: the bomb ran on beside the verifier, which passed.
		if vr.Passed != 3 {
			t.Errorf("live, but %d/3 passed", vr.Passed)
		}
		if before >= 0 && after < 100 {
			t.Errorf("the fork bomb was not running beside the verifier: %d processes after", after)
		}
	case strings.Contains(vr.LiveRefused, "no answer"):
		// The sandbox full, the survey's exec never started (it does now
		// and then, CI's machine more often): kill-first, said in the
		// record, the server stopped with the bomb.
		if vr.Passed != 1 {
			t.Errorf("kill-first after an unanswered survey, but %d/3 passed", vr.Passed)
		}
	default:
		t.Errorf("the server was running and the survey answered, yet verified kill-first (%q)", vr.LiveRefused)
	}
	r.leftNothing()
}

// TestLiveVerifierAfterACrashedAttempt: an attempt that died with a live
// verifier running and the sandbox frozen (a worker killed mid-verification)
// leaves both behind; the retry thaws the sandbox, replaces the verifier and
// resolves, and nothing is left after it.
func TestLiveVerifierAfterACrashedAttempt(t *testing.T) {
	r := newLiveRig(t)
	r.oracle("")
	ctx := context.Background()
	thaw, err := r.d.FreezeForVerifier(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := r.d.Client.ContainerInspect(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.d.StartLiveVerifier(ctx, ins, thaw); err != nil {
		t.Fatal(err)
	}
	if err := r.d.Client.ContainerPause(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	vr := r.verify()
	if !vr.Resolved || vr.Passed != 3 || vr.LiveService == 0 {
		t.Fatalf("the retry: resolved %v, %d/%d, serving %d; want resolved 3/3 live", vr.Resolved, vr.Passed, vr.Total, vr.LiveService)
	}
	r.leftNothing()
}
