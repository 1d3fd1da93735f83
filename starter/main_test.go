package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/gpu"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/testenv"
	"github.com/t1flow/t1flow/worker/roles"
	"github.com/t1flow/t1flow/workflows"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

func starter(t *testing.T, args ...string) (int, string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String(), err
}

func copyTask(t *testing.T, src, dst string) {
	t.Helper()
	filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, _ := os.ReadFile(p)
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode())
	})
}

func TestImportAndListPool(t *testing.T) {
	t.Setenv("T1FLOW_STORE", t.TempDir())
	code, out, _, err := starter(t, "tasks", "import", "../examples/tasks", "--pool", "ex")
	if code != 0 || err != nil || !strings.Contains(out, "pool ex: 8 tasks (8 new)") {
		t.Fatalf("import: %d %v %q", code, err, out)
	}
	code, out, _, _ = starter(t, "tasks", "import", "../examples/tasks/log-level-counter", "--pool", "ex")
	if code != 0 || !strings.Contains(out, "(0 new)") {
		t.Fatalf("re-import must not duplicate: %q", out)
	}
	code, out, _, _ = starter(t, "tasks", "list", "--pool", "ex")
	if code != 0 || !strings.Contains(out, "git-release-branch") || strings.Count(out, "\n") != 9 {
		t.Fatalf("list: %q", out)
	}
	code, _, _, err = starter(t, "tasks", "list", "--pool", "nope")
	if code != 2 || !strings.Contains(err.Error(), `pool "nope" does not exist`) {
		t.Fatalf("missing pool: %d %v", code, err)
	}
}

func TestMalformedTasksStartNothing(t *testing.T) {
	srv, c := testenv.DevServer(t)
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	t.Setenv("T1FLOW_STORE", t.TempDir())
	root := t.TempDir()
	copyTask(t, "../examples/tasks/log-level-counter", filepath.Join(root, "good"))
	copyTask(t, "../examples/tasks/log-level-counter", filepath.Join(root, "bad-toml"))
	os.WriteFile(filepath.Join(root, "bad-toml", "task.toml"), []byte("[verifier]\ntimeout_sec = -5\n"), 0o644)
	copyTask(t, "../examples/tasks/log-level-counter", filepath.Join(root, "no-tests"))
	os.Remove(filepath.Join(root, "no-tests", "tests", "test.sh"))

	count := func() int64 {
		resp, err := c.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	before := count()
	code, _, _, err := starter(t, "eval", "--tasks", root, "--agent", "oracle", "--wait")
	if code != 2 || err == nil {
		t.Fatalf("want exit 2 and an error, got %d %v", code, err)
	}
	for _, want := range []string{
		filepath.Join(root, "bad-toml", "task.toml") + ": verifier.timeout_sec = -5 must be between",
		filepath.Join(root, "no-tests", "tests", "test.sh") + ": missing",
		"nothing was started",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if after := count(); after != before {
		t.Errorf("%d workflows started from malformed input", after-before)
	}
	code, _, _, err = starter(t, "tasks", "import", root, "--pool", "x")
	if code != 2 || !strings.Contains(err.Error(), "bad-toml") {
		t.Fatalf("import of malformed tasks: %d %v", code, err)
	}
}

func TestEvalJSONDocument(t *testing.T) {
	srv, c := testenv.DevServer(t)
	d := testenv.Docker(t)
	dir := t.TempDir()
	st, _ := store.NewLocal(dir)
	testenv.Worker(t, c, roles.All, &activities.Activities{Docker: d, Store: st, Temporal: c, Host: testenv.HostName("starter"), TaskCache: t.TempDir()})
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	t.Setenv("T1FLOW_STORE", dir)

	code, out, stderr, err := starter(t, "eval", "--tasks", "../examples/tasks/log-level-counter", "--agent", "oracle", "--json", "--new")
	if code != 0 || err != nil {
		t.Fatalf("eval: %d %v\n%s", code, err, stderr)
	}
	if !strings.Contains(stderr, "http://localhost:8233/namespaces/default/workflows/eval%2F") {
		t.Errorf("no UI link on stderr: %q", stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out)
	}
	for _, k := range []string{"workflow_id", "resolved_rate", "mean_reward", "tasks"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("missing %q", k)
		}
	}
	tasks := doc["tasks"].([]any)
	row := tasks[0].(map[string]any)
	for _, k := range []string{"name", "category", "difficulty", "reward", "passed", "total", "resolved", "outcome", "turns", "duration_s"} {
		if _, ok := row[k]; !ok {
			t.Errorf("task row missing %q", k)
		}
	}
	if doc["resolved_rate"].(float64) != 1 || row["name"] != "log-level-counter" || row["reward"].(float64) != 0.2 || row["resolved"] != true {
		t.Errorf("unexpected results: %v", doc)
	}
	// The same request again finds the finished sweep instead of running it twice.
	wid := doc["workflow_id"].(string)
	code, out, stderr, _ = starter(t, "eval", "--tasks", "../examples/tasks/log-level-counter", "--agent", "oracle", "--id", strings.TrimPrefix(wid, "eval/"), "--json")
	if code != 0 || !strings.Contains(stderr, "found existing sweep") || !strings.Contains(out, wid) {
		t.Fatalf("re-run: %d %q %q", code, stderr, out)
	}
}

func TestPolicyEvalAndTrace(t *testing.T) {
	srv, c := testenv.DevServer(t)
	d := testenv.Docker(t)
	if err := exec.Command(gpu.Python(), "-c", "import torch").Run(); err != nil {
		t.Fatalf("%s cannot import torch: %v", gpu.Python(), err)
	}
	inf := &gpu.Supervisor{Name: "inference", Command: gpu.InferenceCommand("", gpu.Slot{}, "--seed", "0", "--threads", "1"), LogPath: filepath.Join(t.TempDir(), "inf.log")}
	if err := inf.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer inf.Stop()
	dir := t.TempDir()
	st, _ := store.NewLocal(dir)
	testenv.Worker(t, c, roles.All, &activities.Activities{Docker: d, Store: st, Temporal: c, Host: testenv.HostName("trace"), TaskCache: t.TempDir(), EpisodeDir: t.TempDir()})
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	t.Setenv("T1FLOW_STORE", dir)

	code, out, stderr, err := starter(t, "eval", "--tasks", "../examples/tasks/sort-photos-by-date", "--agent", "policy", "--harness", "short",
		"--inference", inf.URL(), "--turn-cap", "2", "--max-new-tokens", "16", "--json", "--new")
	if code != 0 || err != nil {
		t.Fatalf("eval: %d %v\n%s", code, err, stderr)
	}
	var doc EvalJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Tasks) != 1 {
		t.Fatalf("eval json: %v %s", err, out)
	}
	row := doc.Tasks[0]
	if row.Turns != 2 || row.Outcome != "unresolved" {
		t.Fatalf("policy rollout: %+v", row)
	}
	code, out, _, err = starter(t, "trace", row.RolloutID)
	if code != 0 || err != nil {
		t.Fatalf("trace: %d %v", code, err)
	}
	for _, want := range []string{"rollout rollout/" + row.RolloutID, "turn 0:", "turn 1:", "invalid action", "assertions (junit)",
		"drift: 0 prompt mismatches, 0 loss mismatches", "routing:", "valid true", "trajectory: file://", "http://localhost:8233/namespaces/default/workflows/"} {
		if !strings.Contains(out, want) {
			t.Errorf("trace output lacks %q:\n%s", want, out)
		}
	}
	code, out, _, _ = starter(t, "trace", row.TaskID)
	if code != 0 || !strings.Contains(out, row.RolloutID) {
		t.Errorf("trace by task ID: %d\n%s", code, out)
	}
	code, _, _, err = starter(t, "trace", "no-such-rollout")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "no rollout") {
		t.Errorf("unknown ID: %d %v", code, err)
	}
}

func TestSynthAndAuditCommands(t *testing.T) {
	srv, c := testenv.DevServer(t)
	d := testenv.Docker(t)
	dir := t.TempDir()
	st, _ := store.NewLocal(dir)
	testenv.Worker(t, c, roles.All, &activities.Activities{Docker: d, Store: st, Temporal: c, Host: testenv.HostName("rst"), TaskCache: t.TempDir(), EpisodeDir: t.TempDir()})
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	t.Setenv("T1FLOW_STORE", dir)

	// The three seeds go to the sweep as a stored manifest, as a set over
	// InlineTaskLimit does.
	inline := InlineTaskLimit
	InlineTaskLimit = 2
	code, out, stderr, err := starter(t, "synth", "--seeds", "../examples/seeds", "--rounds", "1", "--per-seed", "1", "--pool", "rst", "--json", "--concurrency", "3")
	InlineTaskLimit = inline
	if code != 0 || err != nil {
		t.Fatalf("synth: %d %v\n%s", code, err, stderr)
	}
	var syn struct {
		WorkflowID  string `json:"workflow_id"`
		Synthesized int    `json:"synthesized"`
		Tasks       []struct {
			Name, Seed, Parent string
			Round              int
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &syn); err != nil || syn.Synthesized != 3 || len(syn.Tasks) != 3 || syn.Tasks[0].Round != 1 || syn.Tasks[0].Parent == "" {
		t.Fatalf("synth json: %v\n%s", err, out)
	}
	var sin workflows.SynthSweepInput
	if err := startInput(t, c, syn.WorkflowID, &sin); err != nil || len(sin.Seeds) != 0 || sin.SeedManifest == nil {
		t.Errorf("the synth sweep started with %d seeds inline and manifest %v (%v); want a manifest", len(sin.Seeds), sin.SeedManifest, err)
	}
	code, out, _, _ = starter(t, "tasks", "list", "--pool", "rst")
	if code != 0 || strings.Count(out, "\n") != 4 {
		t.Fatalf("pool after synth:\n%s", out)
	}
	// Asking again finds the finished run instead of synthesizing twice.
	code, _, stderr, _ = starter(t, "synth", "--seeds", "../examples/seeds", "--rounds", "1", "--per-seed", "1", "--pool", "rst", "--json", "--concurrency", "3")
	if code != 0 || !strings.Contains(stderr, "found existing run") {
		t.Fatalf("re-run: %d %s", code, stderr)
	}

	code, out, stderr, err = starter(t, "audit", "--tasks", "../workflows/testdata/audit", "--keep-pool", "kept", "--json", "--concurrency", "3")
	if code != 0 || err != nil {
		t.Fatalf("audit: %d %v\n%s", code, err, stderr)
	}
	var aud struct {
		Kept  int `json:"kept"`
		Tasks []struct {
			Name        string             `json:"name"`
			Kept        bool               `json:"kept"`
			Score       float64            `json:"score"`
			HardRejects []string           `json:"hard_rejects"`
			Dimensions  map[string]float64 `json:"dimensions"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &aud); err != nil || len(aud.Tasks) != 6 || aud.Kept != 2 {
		t.Fatalf("audit json: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, r := range aud.Tasks {
		got[r.Name] = strings.Join(r.HardRejects, ",")
		if len(r.Dimensions) != 8 {
			t.Errorf("%s: %d dimensions", r.Name, len(r.Dimensions))
		}
	}
	want := map[string]string{"good-sum": "", "good-small-count": "", "hidden-requirement": "hidden_requirements", "test-leakage": "test_leakage",
		"shortcut-solution": "shortcut_solution", "weak-verifier": "weak_verifier"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: hard rejects %q, want %q", k, got[k], v)
		}
	}
	code, _, _, err = starter(t, "audit", "--pool", "nope", "--keep-pool", "k")
	if code != 2 || err == nil {
		t.Errorf("missing pool: %d %v", code, err)
	}
}

// A task set over InlineTaskLimit goes to the sweep as a stored manifest,
// not inline in its start request (which Temporal refuses past 2 MB, about
// 7000 tasks), and the sweep runs every task of it.
func TestEvalOfManyTasksGoesByManifest(t *testing.T) {
	defer func(n int) { InlineTaskLimit = n }(InlineTaskLimit)
	InlineTaskLimit = 1
	srv, c := testenv.DevServer(t)
	d := testenv.Docker(t)
	dir := t.TempDir()
	st, _ := store.NewLocal(dir)
	testenv.Worker(t, c, roles.All, &activities.Activities{Docker: d, Store: st, Temporal: c, Host: testenv.HostName("manifest"), TaskCache: t.TempDir()})
	t.Setenv("TEMPORAL_ADDRESS", srv.Address)
	t.Setenv("T1FLOW_STORE", dir)
	tasks := t.TempDir()
	for _, name := range []string{"log-level-counter", "stale-cache-cleanup"} {
		copyTask(t, "../examples/tasks/"+name, filepath.Join(tasks, name))
	}
	code, out, stderr, err := starter(t, "eval", "--tasks", tasks, "--agent", "oracle", "--json", "--new")
	if code != 0 || err != nil {
		t.Fatalf("eval: %d %v\n%s", code, err, stderr)
	}
	var doc struct {
		WorkflowID string `json:"workflow_id"`
		Tasks      []struct {
			Name     string `json:"name"`
			Resolved bool   `json:"resolved"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Tasks) != 2 || !doc.Tasks[0].Resolved || !doc.Tasks[1].Resolved {
		t.Fatalf("eval of 2 tasks by manifest: %v\n%s", err, out)
	}
	var in workflows.EvalSweepInput
	if err := startInput(t, c, doc.WorkflowID, &in); err != nil {
		t.Fatal(err)
	}
	if len(in.Tasks) != 0 || in.TaskManifest == nil {
		t.Errorf("the sweep started with %d tasks inline and manifest %v; want none inline, a manifest", len(in.Tasks), in.TaskManifest)
	}
}

// startInput decodes the input a workflow was started with.
func startInput(t *testing.T, c client.Client, wid string, v any) error {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	ev, err := it.Next()
	if err != nil {
		return err
	}
	p := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if len(p) != 1 {
		return fmt.Errorf("%s: %d start payloads", wid, len(p))
	}
	return json.Unmarshal(p[0].GetData(), v)
}
