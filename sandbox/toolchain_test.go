package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
)

func TestTamperDiffFlagsOnlyWhatReachesTheVerifier(t *testing.T) {
	add, mod, del := container.ChangeAdd, container.ChangeModify, container.ChangeDelete
	changes := []container.FilesystemChange{
		// An oracle's apt-get and pip installs, files it writes, users it adds.
		{Kind: mod, Path: "/usr"}, {Kind: mod, Path: "/usr/bin"}, {Kind: add, Path: "/usr/bin/jq"},
		{Kind: mod, Path: "/usr/bin/curl"}, {Kind: mod, Path: "/etc/ld.so.cache"},
		{Kind: add, Path: "/usr/local/bin/python3"}, {Kind: add, Path: "/usr/local/bin/pytest"},
		{Kind: add, Path: "/usr/local/lib/python3.11/dist-packages/distutils-precedence.pth"},
		{Kind: add, Path: "/usr/local/lib/python3.11/dist-packages/_pytest/runner.py"},
		{Kind: mod, Path: "/etc/passwd"}, {Kind: add, Path: "/app/freq.txt"}, {Kind: add, Path: "/app/src/pytest_helpers.py"},
		{Kind: mod, Path: "/logs"}, {Kind: add, Path: "/logs/agent/trace.txt"}, {Kind: add, Path: sandbox.ToolchainMount},
		{Kind: del, Path: "/etc/ld.so.preload"}, {Kind: add, Path: "/srv/pytest.ini"}, {Kind: add, Path: "/app/packaging"},
		// Cheats.
		{Kind: add, Path: "/etc/ld.so.preload"},
		{Kind: add, Path: "/conftest.py"}, {Kind: add, Path: "/pytest.ini"}, {Kind: mod, Path: "/pyproject.toml"},
		{Kind: add, Path: "/app/pytest.py"}, {Kind: add, Path: "/app/sitecustomize.py"}, {Kind: add, Path: "/app/_pytest"},
		{Kind: add, Path: "/app/evil.pth"},
		{Kind: add, Path: "/usr/lib/x86_64-linux-gnu/libnss_db.so.2"},
		{Kind: add, Path: sandbox.ToolchainMount + "/bin/bash"},
	}
	got := map[string]bool{}
	for _, f := range sandbox.TamperDiff(changes, "/app") {
		got[f.Path] = true
	}
	want := []string{"/etc/ld.so.preload", "/conftest.py", "/pytest.ini", "/pyproject.toml", "/app/pytest.py",
		"/app/sitecustomize.py", "/app/_pytest", "/app/evil.pth", "/usr/lib/x86_64-linux-gnu/libnss_db.so.2",
		sandbox.ToolchainMount + "/bin/bash"}
	for _, w := range want {
		if !got[w] {
			t.Errorf("%s not flagged", w)
		}
		delete(got, w)
	}
	for p := range got {
		t.Errorf("false positive: %s", p)
	}
	// In a working directory of /, the same names at / shadow the runner.
	if f := sandbox.TamperDiff([]container.FilesystemChange{{Kind: add, Path: "/pytest.py"}, {Kind: add, Path: "/app/pytest.py"}}, "/"); len(f) != 1 || f[0].Path != "/pytest.py" {
		t.Errorf("workdir /: %v", f)
	}
}

func TestToolchainVerifyCmdIsClean(t *testing.T) {
	img := []string{"PATH=/opt/app/bin:/usr/bin:/bin", "LD_PRELOAD=/x.so", "PYTHONPATH=/app", "PYTHONSTARTUP=/x", "BASH_ENV=/x",
		"HOME=/root", "LANG=C.UTF-8", "APP_MODE=test", "UV_INDEX_URL=http://evil", "PYTEST_ADDOPTS=-p evil"}
	cmd, dropped := sandbox.ToolchainVerifyCmd(img, []string{"TARGET=/app/out", "LD_LIBRARY_PATH=/x"}, 90*time.Second, "/tests/pytest.ini", "")
	m := sandbox.ToolchainMount
	if cmd[0] != m+"/bin/env" || cmd[1] != "-i" || cmd[len(cmd)-1] != "/tests/test.sh" {
		t.Fatalf("cmd %q", cmd)
	}
	joined := strings.Join(cmd, "\n")
	for _, bad := range []string{"LD_PRELOAD=/x.so", "PYTHONPATH=/app", "BASH_ENV", "HOME=/root", "evil", "LD_LIBRARY_PATH"} {
		if strings.Contains(joined, bad) {
			t.Errorf("%s reached the verifier", bad)
		}
	}
	for _, good := range []string{"LANG=C.UTF-8", "APP_MODE=test", "TARGET=/app/out", "PATH=" + m + "/bin:/opt/app/bin:/usr/bin:/bin",
		"HOME=" + m + "/home", "-c /tests/pytest.ini --rootdir=/tests --confcutdir=/tests", m + "/bin/timeout", "90.000"} {
		if !strings.Contains(joined, good) {
			t.Errorf("%s missing from %q", good, cmd)
		}
	}
	if len(dropped) != 8 {
		t.Errorf("dropped %v", dropped)
	}
	run := sandbox.ToolchainRunCmd("/logs/verifier", sandbox.ToolchainStage(), "/app", "", cmd)
	for i, c := range append(append(sandbox.ToolchainKillCmd(), sandbox.ToolchainSurveyCmd()...), run[:len(run)-len(cmd)-2]...) {
		if strings.HasPrefix(c, "/") && !strings.HasPrefix(c, m+"/") {
			t.Errorf("the kill or prepare step runs %s from the container (argument %d)", c, i)
		}
	}
	if a, b := sandbox.ToolchainStage(), sandbox.ToolchainStage(); a == b || !strings.HasPrefix(a, "/.t1flow-tests-") {
		t.Errorf("stages %s %s", a, b)
	}
}

func TestParseSurvey(t *testing.T) {
	for _, c := range []struct {
		out string
		n   int
		ok  bool
	}{
		{sandbox.ToolchainSurveyLine + " 0\n", 0, true},
		{"noise\n" + sandbox.ToolchainSurveyLine + " 2\n", 2, true},
		{"", 0, false}, // killed before it answered
		{sandbox.ToolchainSurveyLine + " \n", 0, false},
	} {
		if n, ok := sandbox.ParseSurvey(c.out); n != c.n || ok != c.ok {
			t.Errorf("ParseSurvey(%q) = %d, %v; want %d, %v", c.out, n, ok, c.n, c.ok)
		}
	}
}

func TestToolchainPytestIni(t *testing.T) {
	dir := t.TempDir()
	if got := sandbox.ToolchainPytestIni(dir); got != sandbox.ToolchainMount+"/etc/pytest.ini" {
		t.Errorf("no ini: %s", got)
	}
	os.WriteFile(filepath.Join(dir, "pyproject.toml"), []byte("[project]\nname='x'\n"), 0o644)
	if got := sandbox.ToolchainPytestIni(dir); got != sandbox.ToolchainMount+"/etc/pytest.ini" {
		t.Errorf("pyproject without pytest section: %s", got)
	}
	os.WriteFile(filepath.Join(dir, "pytest.ini"), []byte("[pytest]\n"), 0o644)
	if got := sandbox.ToolchainPytestIni(dir); got != "/tests/pytest.ini" {
		t.Errorf("task ini: %s", got)
	}
}

func TestToolchainHashFollowsBaseImage(t *testing.T) {
	a, b := sandbox.ToolchainHash("t1flow-base:aaa"), sandbox.ToolchainHash("t1flow-base:bbb")
	if a == b || len(a) != 12 || a != sandbox.ToolchainHash("t1flow-base:aaa") {
		t.Errorf("hashes %s %s", a, b)
	}
}

// --- integration: the real toolchain, real sandboxes, the real cheats -------

type rig struct {
	t    *testing.T
	cli  *client.Client
	tc   sandbox.Toolchain
	debs *sandbox.DebCache
}

func newRig(t *testing.T) *rig {
	if !testenv.Required() {
		t.Skip("integration test: set T1FLOW_INTEGRATION=1")
	}
	ctx := context.Background()
	cli, _, err := sandbox.NewClient(ctx) // the daemon the sandboxes use (the quota daemon where it runs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("docker daemon does not answer: %v", err)
	}
	// The default base (bookworm's Python 3.11), or the one named by
	// T1FLOW_TOOLCHAIN_TEST_BASE (the trixie base's tag: the same checks on
	// the Python 3.13 toolchain).
	base := sandbox.BaseImageTag()
	if v := os.Getenv("T1FLOW_TOOLCHAIN_TEST_BASE"); v != "" {
		base = v
	}
	if _, err := cli.ImageInspect(ctx, base); err != nil {
		t.Fatalf("base image %s: %v (run `make base-image`)", base, err)
	}
	start := time.Now()
	tc, err := sandbox.EnsureToolchain(ctx, cli, base, sandbox.ToolchainHome(testenv.StateDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("toolchain %s at %s: built=%v in %s, %d MB (EnsureToolchain took %s)", tc.Hash, tc.Dir, tc.Built, tc.BuildTime, tc.SizeBytes>>20, time.Since(start))
	return &rig{t: t, cli: cli, tc: tc, debs: &sandbox.DebCache{Dir: filepath.Join(sandbox.ToolchainHome(testenv.StateDir()), "debs")}}
}

var fromRe = regexp.MustCompile(`(?m)^FROM \S+`)

// image builds a task's environment with FROM pointed at the base image (the
// alias map's effect, without the activities' machinery).
func (r *rig) image(taskDir, base string) string {
	r.t.Helper()
	ctx := context.Background()
	df, err := os.ReadFile(filepath.Join(taskDir, "environment/Dockerfile"))
	if err != nil {
		r.t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	env := filepath.Join(taskDir, "environment")
	filepath.WalkDir(env, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(env, p)
		if rel == "Dockerfile" {
			b = fromRe.ReplaceAll(df, []byte("FROM "+base))
		}
		tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(b))})
		tw.Write(b)
		return nil
	})
	tw.Close()
	tag := "t1flow-sealtest:" + filepath.Base(taskDir)
	resp, err := r.cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, Version: build.BuilderV1})
	if err != nil {
		r.t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(out, []byte(`"error"`)) {
		r.t.Fatalf("build %s: %s", tag, out)
	}
	return tag
}

func (r *rig) baseTag() string {
	return strings.TrimSpace(readFile(r.t, filepath.Join(r.tc.Dir, ".ready")))
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sandbox starts a container the way the activities do (no network, caps
// dropped, no-new-privileges, the sandbox's seccomp profile) plus the
// toolchain mount.
func (r *rig) sandbox(img string) string {
	r.t.Helper()
	return r.sandboxOn(img, "none")
}

// sandboxOn is sandbox on a network ("none", or "bridge" for a task with
// allow_internet).
func (r *rig) sandboxOn(img, network string) string {
	r.t.Helper()
	ctx := context.Background()
	resp, err := r.cli.ContainerCreate(ctx, &container.Config{
		Image: img, Cmd: []string{"bash", "-c", "trap '' TERM INT HUP; while :; do sleep 86400 & wait $!; done"},
		Labels: map[string]string{"t1flow.sealtest": "1"},
	}, &container.HostConfig{
		NetworkMode: container.NetworkMode(network),
		CapDrop:     []string{"ALL"},
		CapAdd:      []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "AUDIT_WRITE", "MKNOD"},
		SecurityOpt: sandbox.SecurityOpt(),
		Mounts:      []mount.Mount{r.tc.Mount()},
	}, nil, nil, "")
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		r.cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	if err := r.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		r.t.Fatal(err)
	}
	return resp.ID
}

func (r *rig) exec(id string, cmd []string, env []string, wd string) (int, string) {
	r.t.Helper()
	var out bytes.Buffer
	code := r.execTo(id, cmd, env, wd, &out, &out)
	return code, out.String()
}

// execTo runs cmd with its stdout and stderr to the writers given.
func (r *rig) execTo(id string, cmd []string, env []string, wd string, stdout, stderr io.Writer) int {
	r.t.Helper()
	ctx := context.Background()
	ex, err := r.cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: cmd, Env: env, WorkingDir: wd, User: "root", AttachStdout: true, AttachStderr: true})
	if err != nil {
		r.t.Fatal(err)
	}
	hj, err := r.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	stdcopy.StdCopy(stdout, stderr, hj.Reader)
	hj.Close()
	ins, err := r.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		r.t.Fatal(err)
	}
	return ins.ExitCode
}

func (r *rig) copyDir(id, src, dst string) {
	r.t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(src, p)
		info, _ := d.Info()
		tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(dst, "/") + "/" + rel, Mode: int64(info.Mode().Perm()), Size: int64(len(b))})
		tw.Write(b)
		return nil
	})
	tw.Close()
	if err := r.cli.CopyToContainer(context.Background(), id, "/", &buf, container.CopyToContainerOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

type verdict struct {
	passed, total int
	reward        string
	marked        bool
	output        string
	took          time.Duration
	channel       sandbox.RunnerChannel // what the runner reported
}

// kill stops every process left in the sandbox, as Verify does first.
func (r *rig) kill(id string) {
	r.t.Helper()
	if code, out := r.exec(id, sandbox.ToolchainKillCmd(), sandbox.ToolchainExecEnv, "/"); code != 0 {
		r.t.Fatalf("kill: %d %s", code, out)
	}
}

// tamper is Verify's tamper check: the agent's processes stopped, then the
// sandbox compared with its image.
func (r *rig) tamper(id string) []sandbox.TamperFinding {
	r.t.Helper()
	r.kill(id)
	ins, err := r.cli.ContainerInspect(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	f, err := sandbox.TamperCheck(context.Background(), r.cli, ins, r.debs)
	if err != nil {
		r.t.Fatal(err)
	}
	return f
}

// verify is the rest of the sealed verification Verify runs: processes
// stopped (again: tamper did it when called), tests staged, one exec that
// readies the verifier and runs test.sh sealed, results read.
func (r *rig) verify(id, taskDir string) verdict {
	r.t.Helper()
	ctx := context.Background()
	start := time.Now()
	r.kill(id)
	stage := sandbox.ToolchainStage()
	r.copyDir(id, filepath.Join(taskDir, "tests"), stage)
	ins, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd, _ := sandbox.ToolchainVerifyCmd(ins.Config.Env, nil, 2*time.Minute, sandbox.ToolchainPytestIni(filepath.Join(taskDir, "tests")), "")
	var ready, out bytes.Buffer
	code := r.execTo(id, sandbox.ToolchainRunCmd("/logs/verifier", stage, ins.Config.WorkingDir, "", cmd), sandbox.ToolchainExecEnv, "/", &ready, &out)
	first, channel, _ := strings.Cut(ready.String(), "\n")
	if first != sandbox.ToolchainReady {
		r.t.Fatalf("the verifier never got ready: exit %d, stdout %q, stderr:\n%s", code, ready.String(), out.String())
	}
	v := verdict{output: out.String(), took: time.Since(start), channel: sandbox.ParseRunnerChannel([]byte(channel), int64(len(channel)))}
	_, ctrf := r.exec(id, []string{sandbox.ToolchainMount + "/bin/cat", "/logs/verifier/ctrf.json"}, sandbox.ToolchainExecEnv, "/")
	var doc struct {
		Results struct {
			Tests []struct{ Status string } `json:"tests"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(ctrf), &doc); err == nil {
		for _, tt := range doc.Results.Tests {
			v.total++
			if tt.Status == "passed" {
				v.passed++
			}
		}
	}
	_, v.reward = r.exec(id, []string{sandbox.ToolchainMount + "/bin/cat", "/logs/verifier/reward.txt"}, sandbox.ToolchainExecEnv, "/")
	v.reward = strings.TrimSpace(v.reward)
	code, _ = r.exec(id, []string{sandbox.ToolchainMount + "/bin/test", "-e", sandbox.ToolchainRunnerMark}, sandbox.ToolchainExecEnv, "/")
	v.marked = code == 0
	return v
}

func TestSealedVerifierTerminalBenchTasks(t *testing.T) {
	r := newRig(t)
	base := r.baseTag()
	for _, name := range []string{"word-frequency", "inventory-module"} {
		dir := filepath.Join(testenv.RepoRoot(), "examples/tb2", name)
		img := r.image(dir, base)
		for _, agent := range []string{"oracle", "nop"} {
			t.Run(name+"/"+agent, func(t *testing.T) {
				r.t = t
				id := r.sandbox(img)
				if agent == "oracle" {
					r.copyDir(id, filepath.Join(dir, "solution"), "/solution")
					if code, out := r.exec(id, []string{"bash", "/solution/solve.sh"}, nil, ""); code != 0 {
						t.Fatalf("solve.sh: %d %s", code, out)
					}
				}
				if f := r.tamper(id); len(f) != 0 {
					t.Fatalf("tamper check on a clean %s rollout: %v", agent, f)
				}
				v := r.verify(id, dir)
				t.Logf("%s %s: %d/%d passed, reward %q, runner marked %v, verify took %s", name, agent, v.passed, v.total, v.reward, v.marked, v.took)
				want := 0
				if agent == "oracle" {
					want = 5
				}
				if v.total != 5 || v.passed != want || !v.marked {
					t.Fatalf("%d/%d passed (want %d/5), marked %v; output:\n%s", v.passed, v.total, want, v.marked, v.output)
				}
				if !strings.Contains(v.output, "runs on the toolchain's Python "+sandbox.ToolchainPython(base)) {
					t.Errorf("uvx -p 3.13 did not say which Python it used:\n%s", v.output)
				}
			})
		}
	}
}

// TestSealedVerifierExampleTasks runs the oracle of every example task and
// verifies it sealed: the tamper check stays clean and test.sh (pytest on the
// toolchain's Python) exits 0.
func TestSealedVerifierExampleTasks(t *testing.T) {
	r := newRig(t)
	dirs, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "examples/tasks/*"))
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			r.t = t
			img := r.image(dir, r.baseTag())
			id := r.sandbox(img)
			r.copyDir(id, filepath.Join(dir, "solution"), "/solution")
			ins, _ := r.cli.ContainerInspect(context.Background(), id)
			if code, out := r.exec(id, []string{"bash", "/solution/solve.sh"}, nil, ins.Config.WorkingDir); code != 0 {
				t.Fatalf("solve.sh: %d %s", code, out)
			}
			if f := r.tamper(id); len(f) != 0 {
				t.Fatalf("tamper check on the oracle: %v", f)
			}
			v := r.verify(id, dir)
			sh := func(script string) string {
				_, out := r.exec(id, []string{sandbox.ToolchainMount + "/bin/bash", "-c", script}, append(sandbox.ToolchainExecEnv, "PATH="+sandbox.ToolchainMount+"/bin"), "/")
				return strings.TrimSpace(out)
			}
			cases := sh("grep -o '<testcase' /logs/verifier/junit.xml | wc -l")
			fails := sh("grep -o '<failure\\|<error' /logs/verifier/junit.xml | wc -l")
			t.Logf("%s: %s test cases, %s failed, runner marked %v, verify took %s", filepath.Base(dir), cases, fails, v.marked, v.took)
			if cases == "0" || fails != "0" || !v.marked {
				t.Fatalf("the oracle did not pass sealed: %s cases, %s failed, marked %v\n%s", cases, fails, v.marked, v.output)
			}
			r.noRunnerFindings(id, v)
		})
	}
}

// cheatsFlagged are the cheat scripts TamperCheck must flag; the others are
// defeated by sealing alone (flagging them would flag oracles too).
var cheatsFlagged = map[string][]string{
	"root-pytest-config.sh": {"/conftest.py", "/pyproject.toml", "/pytest.ini"},
	"ld-preload.sh":         {"/etc/ld.so.preload"},
	"symlinks.sh":           {"/logs/verifier", "/tests"},
	"workdir-shadow.sh":     {"/app/pytest", "/app/pytest.py"},
	"nss-module.sh":         {"/usr/lib/x86_64-linux-gnu/libnss_db.so.2", "/usr/lib/x86_64-linux-gnu/libnss_evil.so.2"},
	"sitecustomize.sh":      {"/app/sitecustomize.py", "/app/usercustomize.py"},
}

func TestSealedVerifierDefeatsCheats(t *testing.T) {
	r := newRig(t)
	dir := filepath.Join(testenv.RepoRoot(), "examples/tb2/word-frequency")
	img := r.image(dir, r.baseTag())
	cheats, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "examples/cheats/*.sh"))
	if len(cheats) < 10 {
		t.Fatalf("only %d cheat scripts", len(cheats))
	}
	for _, c := range cheats {
		name := filepath.Base(c)
		t.Run(name, func(t *testing.T) {
			r.t = t
			id := r.sandbox(img)
			script := readFile(t, c)
			if code, out := r.exec(id, []string{"bash", "-c", script}, nil, ""); code != 0 || !strings.Contains(out, "planted") {
				t.Fatalf("planting: %d %s", code, out)
			}
			f := r.tamper(id)
			var paths []string
			for _, x := range f {
				paths = append(paths, x.Path)
			}
			sort.Strings(paths)
			paths = compact(paths)
			if want := cheatsFlagged[name]; strings.Join(paths, " ") != strings.Join(want, " ") {
				t.Errorf("flagged %v, want %v (%v)", paths, want, f)
			}
			v := r.verify(id, dir)
			t.Logf("%s: flagged %v; %d/%d passed, reward %q, verify took %s", name, paths, v.passed, v.total, v.reward, v.took)
			if v.passed != 0 || v.total != 5 || v.reward != "0" || !v.marked {
				t.Fatalf("the cheat reached the verdict: %d/%d passed, reward %q, marked %v\n%s", v.passed, v.total, v.reward, v.marked, v.output)
			}
		})
	}
}

// noRunnerFindings fails the test when the runner's channel disagrees with
// the results of a verification that should be clean (an oracle's).
func (r *rig) noRunnerFindings(id string, v verdict) {
	r.t.Helper()
	vr, err := r.results(id)
	if err != nil {
		r.t.Fatalf("results: %v", err)
	}
	if v.channel.Sessions == 0 {
		r.t.Fatalf("no pytest session on the runner's channel:\n%s", v.output)
	}
	if f := activities.RunnerDisagrees(vr, v.channel); len(f) != 0 {
		r.t.Fatalf("the runner's channel flags an oracle (%d/%d in the results): %v", vr.Passed, vr.Total, f)
	}
}

func compact(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// TestToolchainCurlTrustsOnlyItsOwnCAs plants examples/cheats/fake-installer.sh
// (a CA of the agent's in the sandbox's trust store, astral.sh pointed at its
// TLS server in /etc/hosts) and leaves its server running, as a live
// verification does: the sandbox's own curl downloads the fake installer,
// the toolchain's curl, run as test.sh runs it, refuses the certificate.
func TestToolchainCurlTrustsOnlyItsOwnCAs(t *testing.T) {
	r := newRig(t)
	id := r.sandbox(r.image(filepath.Join(testenv.RepoRoot(), "examples/tb2/word-frequency"), r.baseTag()))
	script := readFile(t, filepath.Join(testenv.RepoRoot(), "examples/cheats/fake-installer.sh"))
	if code, out := r.exec(id, []string{"bash", "-c", script}, nil, ""); code != 0 || !strings.Contains(out, "planted") {
		t.Fatalf("planting: %d %s", code, out)
	}
	url := "https://astral.sh/uv/0.9.5/install.sh"
	if code, out := r.exec(id, []string{"curl", "-sSf", url}, nil, "/"); code != 0 || !strings.Contains(out, "runner-started") {
		t.Fatalf("the sandbox's curl did not get the fake installer (exit %d): %s", code, out)
	}
	m := sandbox.ToolchainMount
	code, out := r.exec(id, []string{m + "/bin/env", "-i", "PATH=" + m + "/bin", "HOME=" + m + "/home", m + "/bin/curl", "-sSf", url}, sandbox.ToolchainExecEnv, "/")
	t.Logf("the toolchain's curl: exit %d: %s", code, strings.TrimSpace(out))
	if code == 0 || strings.Contains(out, "runner-started") {
		t.Fatalf("the toolchain's curl trusted the agent's CA (exit %d): %s", code, out)
	}
	// curl -q reads no .curlrc: the bundle built into the toolchain's
	// libcurl is the toolchain's too (toolchainStringPatches), and it names
	// no CA directory.
	code, out = r.exec(id, []string{m + "/bin/env", "-i", "PATH=" + m + "/bin", "HOME=" + m + "/home", m + "/bin/curl", "-q", "-vsSf", url}, sandbox.ToolchainExecEnv, "/")
	t.Logf("the toolchain's curl -q: exit %d", code)
	if code == 0 || strings.Contains(out, "runner-started") || !strings.Contains(out, "CAfile: "+m+"/etc/") {
		t.Fatalf("the toolchain's curl -q trusted the agent's CA or not the toolchain's bundle (exit %d): %s", code, out)
	}
}
