package workflows_test

import (
	"bufio"
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

	"github.com/docker/docker/api/types/image"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/harness/harbor"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/sandbox"
	"github.com/t1flow/t1flow/workflows"
)

// harborDivergence is an examples/harbor-proof task whose reward under
// Harbor's own oracle run on this machine differs from t1flow's: why, and
// what Harbor's verifier output (verifier/test-stdout.txt) shows when it is
// that cause and no other.
type harborDivergence struct{ why, marker string }

// tb2Offline: Terminal-Bench 2's test.sh downloads uv from astral.sh, which
// no container here resolves (curl is in t1flow's bases already; in Harbor's
// compose network even apt-get update failed to resolve Debian's mirror), so
// uvx is never installed and test.sh writes reward 0 without running a test.
// t1flow's sealed verifier runs the same test.sh offline with its own uv and
// wheelhouse (docs/verification.md).
var tb2Offline = harborDivergence{
	why:    "offline: test.sh downloads uv from astral.sh (curl: (6)), so uvx is not found and pytest never runs; Harbor writes 0",
	marker: "uvx: command not found",
}

// harborOracleDivergences are the measured divergences (docs/task-format.md,
// "Proof tasks"). Every other task must get the same reward from both.
var harborOracleDivergences = map[string]harborDivergence{
	"pip-install":           tb2Offline,
	"py313-features":        tb2Offline,
	"service-from-solution": tb2Offline,
	"skipped-tests":         tb2Offline,
	"uvx-python-313-on-311": tb2Offline,
	// test.sh runs `python3 -m pytest --ctrf` on the image's Python: the
	// python:3.11-slim image has no pytest, t1flow's python-bookworm base has
	// Debian's without pytest-json-ctrf, so no ctrf.json and no reward.txt
	// (RewardFileNotFoundError); t1flow's sealed verifier brings both.
	"partial-reward-txt": {
		why:    "test.sh runs the image's pytest with --ctrf; the image lacks pytest-json-ctrf (python:3.11-slim has no pytest at all), so Harbor finds no reward file; t1flow's sealed verifier supplies both",
		marker: "unrecognized arguments: --ctrf",
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

// tagBases tags, under each FROM image the tasks' Dockerfiles name, the local
// base t1flow maps it to (built first when missing), and returns the names
// it tagged. A FROM image already on the daemon as another image is an error:
// Harbor would build on it and not on t1flow's base.
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
	var tagged []string
	for from, local := range want {
		src, err := d.Client.ImageInspect(ctx, local)
		if err != nil {
			t.Fatalf("FROM %s maps to %s: %v", from, local, err)
		}
		if have, err := d.Client.ImageInspect(ctx, from); err == nil && have.ID != src.ID {
			t.Fatalf("FROM %s: the daemon holds another image under that name (%s), which Harbor would build on instead of t1flow's %s", from, have.ID, local)
		}
		if err := d.Client.ImageTag(ctx, local, from); err != nil {
			t.Fatalf("tag %s as %s: %v", local, from, err)
		}
		t.Logf("FROM %s: t1flow's %s", from, local)
		tagged = append(tagged, from)
	}
	sort.Strings(tagged)
	return tagged
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
		{"pip-install", harborTrial{reward: f(0), stdout: "bash: line 18: uvx: command not found"}, f(1), "no: " + tb2Offline.why, false},
		{"pip-install", harborTrial{reward: f(0), stdout: "FAILED test_outputs.py::test_units"}, f(1), "no", true},
		{"pip-install", harborTrial{reward: f(1)}, f(1), "yes", true},
		{"partial-reward-txt", harborTrial{exception: "RewardFileNotFoundError", stdout: "error: unrecognized arguments: --ctrf"}, f(2.0 / 3), "no: " + harborOracleDivergences["partial-reward-txt"].why, false},
	}
	for _, c := range cases {
		agree, problem := harborAgree(c.name, c.h, c.t1)
		if agree != c.agree || (problem != "") != c.problem {
			t.Errorf("%s, Harbor %s, t1flow %v: agree %q problem %q, want %q and a problem %v", c.name, c.h, *c.t1, agree, problem, c.agree, c.problem)
		}
	}
}
