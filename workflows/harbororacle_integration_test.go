package workflows_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/task"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// harborDivergence is an examples/harbor-proof task whose reward under
// Harbor's own oracle run on this machine differs from t1flow's: why, and
// what Harbor's verifier output (verifier/test-stdout.txt) shows when it is
// that cause and no other.
type harborDivergence struct{ why, marker string }

// harborOracleDivergences are the measured divergences (docs/task-format.md,
// "Proof tasks"). Every other task must get the same reward from both.
var harborOracleDivergences = map[string]harborDivergence{
	// Harbor's uv would download Python 3.13 for `uvx -p 3.13`; offline it
	// finds only the image's 3.11 (tagBases turns downloads off), so pytest
	// never runs and test.sh writes 0. t1flow's sealed verifier runs the
	// tests on its trixie toolchain's 3.13 (docs/verification.md).
	"uvx-python-313-on-311": {
		why:    "offline: Harbor's uv cannot download the Python 3.13 that `uvx -p 3.13` asks for on a python:3.11 image, so pytest never runs and test.sh writes 0",
		marker: "No interpreter found for Python 3.13",
	},
}

// harborTrial is one trial of Harbor's job as its result.json and verifier
// output give it.
type harborTrial struct {
	reward    *float64
	exception string
	stdout    string
}

func (h harborTrial) String() string {
	if h.reward != nil {
		return fmt.Sprintf("%.4g", *h.reward)
	}
	if h.exception != "" {
		return "none (" + h.exception + ")"
	}
	return "none"
}

// harborAgree compares Harbor's trial with t1flow's harbor_reward (nil when
// t1flow scored none). It returns the table's agree column and, when the
// result is not what harborOracleDivergences says, the problem.
func harborAgree(name string, h harborTrial, t1 *float64) (agree, problem string) {
	same := (h.reward == nil) == (t1 == nil) && (h.reward == nil || math.Abs(*h.reward-*t1) <= 1e-3)
	div, known := harborOracleDivergences[name]
	switch {
	case same && !known:
		return "yes", ""
	case same:
		return "yes", "agrees, but harborOracleDivergences lists it (" + div.why + "): remove it there and in docs/task-format.md"
	case !known:
		return "no", "Harbor and t1flow disagree"
	case !strings.Contains(h.stdout, div.marker):
		return "no", fmt.Sprintf("disagrees, but Harbor's verifier output lacks %q, the sign of the known cause (%s)", div.marker, div.why)
	}
	return "no: " + div.why, ""
}

// TestHarborOracleAgrees runs Harbor's own oracle (harbor run -a oracle -e
// docker, Harbor 0.26 from harborenv driving the docker compose v5 plugin of
// `make compose`) and t1flow's oracle (an eval sweep, as TestHarborProofTasks)
// on examples/harbor-proof, and compares each task's reward: a disagreement
// that harborOracleDivergences does not explain fails, and so does a listed
// one that no longer happens. Harbor builds each task's Dockerfile itself;
// its FROM images are t1flow's mapped bases tagged under the FROM names
// (nothing is pulled: Harbor's compose build passes no --pull). `make
// harbor-oracle-diff` runs it (T1FLOW_HARBOR_ORACLE=1: Harbor's run takes
// about 6 minutes on 2 cores, so `make test` skips it); Harbor's job
// directory is kept under $T1FLOW_HARBOR_JOBS when that is set.
func TestHarborOracleAgrees(t *testing.T) {
	if os.Getenv("T1FLOW_HARBOR_ORACLE") != "1" {
		t.Skip("Harbor's own oracle run (about 6 minutes): set T1FLOW_HARBOR_ORACLE=1, as `make harbor-oracle-diff` does")
	}
	plugin := filepath.Join(testenv.StateDir(), "docker", "cli-plugins", "docker-compose")
	if _, err := os.Stat(plugin); err != nil {
		t.Fatalf("no docker compose plugin at %s: run `make compose` (opt-in, about 4 minutes)", plugin)
	}
	harborBin := filepath.Join(filepath.Dir(harbor.Python()), "harbor")
	if _, err := os.Stat(harborBin); err != nil {
		t.Fatalf("no harbor CLI at %s: run `make harborenv`", harborBin)
	}
	r := newRig(t, true)
	d := testenv.Docker(t)
	ctx := context.Background()

	// A copy: Harbor writes nothing into a task, but a check of this test
	// can alter the copy and not the committed tasks.
	tasks := filepath.Join(r.dir, "harbor-proof")
	if err := os.CopyFS(tasks, os.DirFS(filepath.Join(testenv.RepoRoot(), "examples/harbor-proof"))); err != nil {
		t.Fatal(err)
	}
	for _, from := range tagBases(ctx, t, d, tasks) {
		t.Cleanup(func() { d.Client.ImageRemove(context.Background(), from, image.RemoveOptions{}) })
	}
	refs := r.load(t, tasks)

	// Harbor's job beside t1flow's sweep (both wait mostly on containers).
	jobs := os.Getenv("T1FLOW_HARBOR_JOBS")
	if jobs == "" {
		jobs = filepath.Join(r.dir, "harbor-jobs")
	}
	job := fmt.Sprintf("oracle-%d", time.Now().Unix())
	type harborRun struct {
		out []byte
		err error
		dur time.Duration
	}
	done := make(chan harborRun, 1)
	go func() {
		hctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(hctx, harborBin, "run", "-p", tasks, "-a", "oracle", "-e", "docker",
			"-o", jobs, "--job-name", job, "-n", "2", "-y", "-q")
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Dir(filepath.Dir(plugin)),
			"DOCKER_HOST="+d.Client.DaemonHost(), "LITELLM_LOCAL_MODEL_COST_MAP=True")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		done <- harborRun{out, err, time.Since(start)}
	}()
	start := time.Now()
	rep := r.report(t, r.startSweep(t, workflows.EvalSweepInput{Tasks: refs, Concurrency: 2, Agent: activities.AgentSpec{Kind: activities.AgentOracle}}), 15*time.Minute)
	t.Logf("t1flow's oracle sweep: %s", time.Since(start).Round(time.Second))
	hr := <-done
	t.Logf("harbor run: %s", hr.dur.Round(time.Second))
	if hr.err != nil {
		t.Fatalf("harbor run: %v\n%s", hr.err, tail(hr.out, 40))
	}
	t.Logf("Harbor's job: %s", filepath.Join(jobs, job))
	trials := readHarborJob(t, filepath.Join(jobs, job))

	var table strings.Builder
	table.WriteString("| task | Harbor's reward (harbor run) | t1flow's harbor_reward | agree |\n|---|---|---|---|\n")
	seen := map[string]bool{}
	for _, ro := range rep.Rollouts {
		seen[ro.Name] = true
		h, ok := trials[ro.Name]
		if !ok {
			t.Errorf("%s: no trial in Harbor's job", ro.Name)
			continue
		}
		var t1 *float64
		t1s := "none (" + ro.Outcome + ")"
		if ro.Scored && ro.HarborReward != nil {
			t1, t1s = ro.HarborReward, fmt.Sprintf("%.4g", *ro.HarborReward)
		}
		agree, problem := harborAgree(ro.Name, h, t1)
		fmt.Fprintf(&table, "| `%s` | %s | %s | %s |\n", ro.Name, h, t1s, agree)
		if problem != "" {
			t.Errorf("%s: %s: Harbor %s, t1flow %s; Harbor's verifier output:\n%s", ro.Name, problem, h, t1s, tail([]byte(h.stdout), 15))
		}
	}
	for name := range trials {
		if !seen[name] {
			t.Errorf("Harbor ran %s, which t1flow's sweep did not", name)
		}
	}
	if len(rep.Rollouts) != len(refs) {
		t.Errorf("%d rollouts for %d tasks", len(rep.Rollouts), len(refs))
	}
	t.Logf("Harbor's oracle against t1flow's on examples/harbor-proof:\n%s", table.String())
}

var fromImage = regexp.MustCompile(`(?i)^\s*FROM\s+(?:--\S+\s+)*(\S+)`)

// harborOfflineLabel marks the images tagBases builds, so a later run may
// replace them; any other image under a FROM name is refused.
const harborOfflineLabel = "t1flow.harbor-offline"

// tagBases builds, under each FROM image the tasks' Dockerfiles name, t1flow's
// mapped base of it (built first when missing) with one thin layer that
// stands in for what Terminal-Bench 2's test.sh downloads from astral.sh,
// which nothing here can reach: uv 0.9.5 (the static build the sealed
// toolchain unpacks from PyPI's wheel) in $HOME/.local/bin with the env file
// its installer writes, and the toolchain's pinned wheels (pytest 8.4.1,
// pytest-json-ctrf 0.3.5 and their dependencies) as uv's only source, with
// Python downloads off: a `uvx -p X` then runs on the image's own Python X,
// or fails where the image has none (Harbor's uv would download it). It
// returns the names it tagged. A FROM image already on the daemon that
// tagBases did not build is an error: Harbor would build on it and not on
// t1flow's base.
func tagBases(ctx context.Context, t *testing.T, d *sandbox.Docker, tasks string) []string {
	t.Helper()
	dockerfiles, err := filepath.Glob(filepath.Join(tasks, "*", "environment", "Dockerfile"))
	if err != nil || len(dockerfiles) == 0 {
		t.Fatalf("no environment/Dockerfile under %s (%v)", tasks, err)
	}
	want := map[string]string{}
	for _, df := range dockerfiles {
		f, err := os.Open(df)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			m := fromImage.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			_, used, bases, err := d.RewriteFrom(sc.Text())
			if err != nil {
				t.Fatalf("%s: %v", df, err)
			}
			for _, b := range bases {
				if _, err := d.EnsureBase(ctx, b); err != nil {
					t.Fatalf("%s: base %s: %v", df, b, err)
				}
			}
			want[m[1]] = used[0]
		}
		f.Close()
	}
	tc, err := sandbox.EnsureToolchain(ctx, d.Client, sandbox.BaseTag(task.BaseBookworm), testenv.StateDir())
	if err != nil {
		t.Fatalf("the verifier toolchain (its uv and wheels stand in for astral.sh): %v", err)
	}
	var tagged []string
	for from, local := range want {
		if have, err := d.Client.ImageInspect(ctx, from); err == nil && have.Config.Labels[harborOfflineLabel] == "" {
			t.Fatalf("FROM %s: the daemon holds another image under that name (%s), which Harbor would build on instead of t1flow's %s", from, have.ID, local)
		}
		buildOffline(ctx, t, d, tc.Dir, local, from)
		t.Logf("FROM %s: t1flow's %s with uv and the pinned wheels", from, local)
		tagged = append(tagged, from)
	}
	sort.Strings(tagged)
	return tagged
}

// buildOffline builds tagBases' layer on local and tags it as name.
func buildOffline(ctx context.Context, t *testing.T, d *sandbox.Docker, toolchain, local, name string) {
	t.Helper()
	const wheels = "/opt/t1flow-harbor-offline/wheels"
	files := map[string]string{
		"Dockerfile": "FROM " + local + "\n" +
			"COPY uv uvx env /root/.local/bin/\n" +
			"COPY wheels/ " + wheels + "/\n" +
			"ENV UV_OFFLINE=1 UV_NO_INDEX=1 UV_FIND_LINKS=" + wheels + " UV_PYTHON_DOWNLOADS=never\n" +
			"LABEL " + harborOfflineLabel + "=1\n",
		// What astral.sh's installer writes, for `source $HOME/.local/bin/env`.
		"env": "case \":${PATH}:\" in *:\"$HOME/.local/bin\":*) ;; *) export PATH=\"$HOME/.local/bin:$PATH\" ;; esac\n",
		"uvx": "#!/bin/sh\nexec \"$(dirname \"$0\")/uv\" tool run \"$@\"\n",
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, b []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for n, body := range files {
		add(n, 0o755, []byte(body))
	}
	uv, err := os.ReadFile(filepath.Join(toolchain, "libexec", "uv"))
	if err != nil {
		t.Fatal(err)
	}
	add("uv", 0o755, uv)
	whls, err := filepath.Glob(filepath.Join(toolchain, "wheels", "*.whl"))
	if err != nil || len(whls) == 0 {
		t.Fatalf("no wheels in %s/wheels (%v)", toolchain, err)
	}
	for _, w := range whls {
		b, err := os.ReadFile(w)
		if err != nil {
			t.Fatal(err)
		}
		add("wheels/"+filepath.Base(w), 0o644, b)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := d.Client.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{name}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("build %s on %s: %v", name, local, err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, &out, 0, false, nil); err != nil {
		t.Fatalf("build %s on %s: %v\n%s", name, local, err, tail(out.Bytes(), 20))
	}
}

// readHarborJob reads each trial of Harbor's job directory: its reward from
// result.json's verifier_result (Harbor's "reward" key), its exception type,
// and its verifier's output.
func readHarborJob(t *testing.T, dir string) map[string]harborTrial {
	t.Helper()
	results, err := filepath.Glob(filepath.Join(dir, "*", "result.json"))
	if err != nil || len(results) == 0 {
		t.Fatalf("no trial result.json under %s (%v)", dir, err)
	}
	trials := map[string]harborTrial{}
	for _, p := range results {
		var res struct {
			TaskName       string `json:"task_name"`
			VerifierResult *struct {
				Rewards map[string]float64 `json:"rewards"`
			} `json:"verifier_result"`
			ExceptionInfo *struct {
				ExceptionType string `json:"exception_type"`
			} `json:"exception_info"`
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &res); err != nil || res.TaskName == "" {
			t.Fatalf("%s: not a Harbor trial result (%v)", p, err)
		}
		var h harborTrial
		if res.VerifierResult != nil {
			if v, ok := res.VerifierResult.Rewards["reward"]; ok {
				h.reward = &v
			}
		}
		if res.ExceptionInfo != nil {
			h.exception = res.ExceptionInfo.ExceptionType
		}
		out, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "verifier", "test-stdout.txt"))
		h.stdout = string(out)
		if _, dup := trials[res.TaskName]; dup {
			t.Fatalf("%s: two trials of %s", dir, res.TaskName)
		}
		trials[res.TaskName] = h
	}
	return trials
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestHarborAgree checks the comparison on its own: equal rewards agree, an
// unlisted disagreement is a problem, and a listed one is accepted only with
// its cause in Harbor's verifier output and only while it still disagrees.
func TestHarborAgree(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		name    string
		h       harborTrial
		t1      *float64
		agree   string
		problem bool
	}{
		{"reward-json", harborTrial{reward: f(1)}, f(1), "yes", false},
		{"reward-json", harborTrial{reward: f(0.6667)}, f(2.0 / 3), "yes", false},
		{"reward-json", harborTrial{reward: f(2.0 / 3)}, f(1), "no", true},
		{"reward-json", harborTrial{exception: "RewardFileNotFoundError"}, f(1), "no", true},
		{"uvx-python-313-on-311", harborTrial{reward: f(0), stdout: "error: No interpreter found for Python 3.13 in virtual environments, managed installations, or search path"}, f(1), "no: " + harborOracleDivergences["uvx-python-313-on-311"].why, false},
		{"uvx-python-313-on-311", harborTrial{reward: f(0), stdout: "FAILED test_outputs.py::test_replace"}, f(1), "no", true},
		{"uvx-python-313-on-311", harborTrial{reward: f(1)}, f(1), "yes", true},
		{"pip-install", harborTrial{reward: f(0), stdout: "error: No interpreter found for Python 3.13"}, f(1), "no", true},
	}
	for _, c := range cases {
		agree, problem := harborAgree(c.name, c.h, c.t1)
		if agree != c.agree || (problem != "") != c.problem {
			t.Errorf("%s, Harbor %s, t1flow %v: agree %q problem %q, want %q and a problem %v", c.name, c.h, *c.t1, agree, problem, c.agree, c.problem)
		}
	}
}
