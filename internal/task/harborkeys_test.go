package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const harborKeysSnapshot = "testdata/harbor-0.26-task-keys.json"

type harborKeys struct {
	Harbor        string   `json:"harbor"`
	SchemaVersion string   `json:"schema_version"`
	Keys          []string `json:"keys"`
}

// Every key of Harbor's task.toml schema (the committed snapshot of the
// pinned Harbor's TaskConfig) is honoured, ignored, warned about or refused
// by t1flow: a key nobody classified could change what a task verifies and
// run unnoticed.
func TestEveryHarborKeyIsClassified(t *testing.T) {
	var snap harborKeys
	b, err := os.ReadFile(harborKeysSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatalf("%s: %v", harborKeysSnapshot, err)
	}
	if len(snap.Keys) < 100 {
		t.Fatalf("%s holds %d keys: regenerate it (scripts/harbor-task-keys.py)", harborKeysSnapshot, len(snap.Keys))
	}
	for _, k := range snap.Keys {
		if c, why := ClassifyKey(k); c == Unclassified {
			t.Errorf("Harbor %s's task.toml key %s is not classified: add it to harborKeyRules (config_keys.go) and docs/task-format.md", snap.Harbor, k)
		} else if (c == Warned || c == Refused) && why == "" {
			t.Errorf("%s is %v without a reason", k, c)
		}
	}
	// The classification is not looser than the schema: a made-up key under
	// an honoured table is unknown, not inherited.
	for _, k := range []string{"environment.flavour", "verifier.flavour", "artifacts.flavour", "flavour"} {
		if c, _ := ClassifyKey(k); c != Unclassified {
			t.Errorf("ClassifyKey(%s) = %v, want Unclassified", k, c)
		}
	}
}

// harborPython is Harbor's interpreter as harness/harbor.Python finds it
// under make (T1FLOW_HARBOR_PYTHON, else $T1FLOW_HOME/harborenv), else the
// repository's .t1flow/harborenv, as testenv.StateDir (both import this
// package).
func harborPython() string {
	if p := os.Getenv("T1FLOW_HARBOR_PYTHON"); p != "" {
		return p
	}
	home := os.Getenv("T1FLOW_HOME")
	if home == "" {
		home = filepath.Join("..", "..", ".t1flow")
	}
	return filepath.Join(home, "harborenv", "bin", "python")
}

// The committed snapshot is the pinned Harbor's schema: regenerated from
// the Harbor env (make harborenv) and compared, so a Harbor pin bump that
// adds or removes a key fails here until the snapshot, the classification
// and docs/task-format.md follow. make test builds the env and sets
// T1FLOW_INTEGRATION=1, which turns a missing env into a failure.
func TestHarborKeysSnapshotIsCurrent(t *testing.T) {
	py := harborPython()
	if _, err := os.Stat(py); err != nil {
		if os.Getenv("T1FLOW_INTEGRATION") == "1" {
			t.Fatalf("%s: run scripts/ensure-harbor-env.sh (make harborenv)", py)
		}
		t.Skipf("no Harbor env at %s (make harborenv)", py)
	}
	cmd := exec.Command(py, "../../scripts/harbor-task-keys.py")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/harbor-task-keys.py: %v\n%s", err, stderr.String())
	}
	want, err := os.ReadFile(harborKeysSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, want) {
		var got, had harborKeys
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("scripts/harbor-task-keys.py: %v\n%s", err, out)
		}
		_ = json.Unmarshal(want, &had)
		t.Errorf("%s is Harbor %s (schema %s); %s has Harbor %s (schema %s): keys added %v, removed %v.\n"+
			"Regenerate it (%s scripts/harbor-task-keys.py > internal/task/%s), classify the new keys and update docs/task-format.md",
			harborKeysSnapshot, had.Harbor, had.SchemaVersion, py, got.Harbor, got.SchemaVersion,
			minus(got.Keys, had.Keys), minus(had.Keys, got.Keys), py, harborKeysSnapshot)
	}
}

// minus is the keys in a that are not in b.
func minus(a, b []string) []string {
	var out []string
	for _, k := range a {
		if !slices.Contains(b, k) {
			out = append(out, k)
		}
	}
	return out
}

// Keys that change what is verified or how the reward is computed are
// refused at load, naming the file, the key and why.
func TestRefusedHarborKeys(t *testing.T) {
	cases := []struct {
		name, toml string
		want       []string
	}{
		{"steps", "[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\nmin_reward = 1.0\n",
			[]string{"task.toml: steps", "multi-step", "steps/<name>/"}},
		{"steps with a strategy", "multi_step_reward_strategy = \"final\"\n[[steps]]\nname = \"one\"\n",
			[]string{"task.toml: steps", "multi-step"}},
		{"separate verifier", "[verifier]\nenvironment_mode = \"separate\"\n",
			[]string{"task.toml: verifier.environment_mode", "separate", "agent's sandbox"}},
		{"verifier environment", "[verifier.environment]\ndocker_image = \"grader:1\"\n",
			[]string{"task.toml: verifier.environment", "separate"}},
		{"empty verifier environment", "[verifier.environment]\n",
			[]string{"task.toml: verifier.environment", "separate"}},
		{"collect hooks", "[[verifier.collect]]\ncommand = \"pg_dump app > /logs/artifacts/db.sql\"\n",
			[]string{"task.toml: verifier.collect", "collect hook"}},
		{"bad mode", "[verifier]\nenvironment_mode = \"elsewhere\"\n",
			[]string{"task.toml: verifier.environment_mode", `"shared" or "separate"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeTask(t, map[string]string{ConfigFile: c.toml}))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Load = %v, want the task refused", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// The same keys at Harbor's defaults, or with no effect on a single-step
// task, load without an error or an unknown-key warning.
func TestRefusedKeysAtTheirDefaultsLoad(t *testing.T) {
	for _, toml := range []string{
		"steps = []\n",
		"multi_step_reward_strategy = \"mean\"\n",
		"[verifier]\nenvironment_mode = \"shared\"\ncollect = []\n",
		"[task]\nname = \"org/demo\"\nversion = \"1.2.0\"\nauthors = [{ name = \"A\", email = \"a@x\" }]\n",
	} {
		tk, err := Load(writeTask(t, map[string]string{ConfigFile: toml}))
		if err != nil {
			t.Errorf("%q: %v", toml, err)
			continue
		}
		for _, w := range tk.Warnings {
			if !strings.Contains(w, "FROM ubuntu:22.04") {
				t.Errorf("%q: warning %s", toml, w)
			}
		}
	}
}

// Harbor keys with a harmless fallback are warnings naming the key and what
// happens instead; keys inside an artifacts entry are checked too.
func TestWarnedHarborKeys(t *testing.T) {
	_, warns, errs := ParseConfig("task.toml", []byte(`artifacts = [{ source = "/app/out", exclude = ["*.pyc"] }, { source = "/data/db", service = "db" }, { source = "/app/x", flavour = 1 }]
[environment]
tpu = { type = "v6e", topology = "2x4" }
[environment.healthcheck]
command = "curl -f localhost:8080"
`))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	all := strings.Join(warns, "\n")
	for _, w := range []string{
		"environment.tpu is not supported (sandboxes get no TPU)",
		"environment.healthcheck is not supported",
		"artifacts[0].exclude is not supported",
		"artifacts[1].service is not supported",
		"unknown key artifacts[2].flavour",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("no warning %q in:\n%s", w, all)
		}
	}
	if strings.Contains(all, "healthcheck.command") {
		t.Errorf("a warned table's keys are warned about again:\n%s", all)
	}
}

// Every task shipped in this repository (examples/, bench/audit-tasks) loads
// without an error, an unknown key or a refused one.
func TestRepoTasksLoadUnderTheClassification(t *testing.T) {
	var dirs []string
	for _, root := range []string{"../../examples", "../../bench/audit-tasks"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == ConfigFile {
				dirs = append(dirs, filepath.Dir(p))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(dirs) < 50 {
		t.Fatalf("found %d tasks under examples/ and bench/audit-tasks, want 50 or more", len(dirs))
	}
	for _, d := range dirs {
		tk, err := Load(d)
		if err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		for _, w := range tk.Warnings {
			if strings.Contains(w, "unknown key") || strings.Contains(w, "is not supported") {
				t.Errorf("%s: %s", d, w)
			}
		}
	}
}

// docs/task-format.md's table of Harbor keys is harborKeyRules, key for key:
// each key once, in the column of its class, "(all)" where its rule covers
// the keys under it.
func TestDocsClassifyEveryHarborKey(t *testing.T) {
	raw, err := os.ReadFile("../../docs/task-format.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## Every Harbor key")
	if start < 0 {
		t.Fatal(`docs/task-format.md has no "## Every Harbor key" section`)
	}
	doc = doc[start:]
	if end := strings.Index(doc[3:], "\n## "); end >= 0 {
		doc = doc[:end+3]
	}
	key := regexp.MustCompile("`([a-z_.]+)`( \\(all\\))?")
	seen := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		cols := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cols) < 3 {
			continue
		}
		for _, m := range key.FindAllStringSubmatch(cols[0], -1) {
			r, ok := harborKeyRules[m[1]]
			switch {
			case !ok:
				t.Errorf("docs list %s, which harborKeyRules does not", m[1])
			case seen[m[1]]:
				t.Errorf("docs list %s twice", m[1])
			case r.class.String() != strings.TrimSpace(cols[1]):
				t.Errorf("docs: %s is %s, harborKeyRules: %v", m[1], cols[1], r.class)
			case r.subtree != (m[2] != ""):
				t.Errorf("docs: %s (all) is %v, harborKeyRules' subtree %v", m[1], m[2] != "", r.subtree)
			}
			seen[m[1]] = true
		}
	}
	for k := range harborKeyRules {
		if !seen[k] {
			t.Errorf("docs/task-format.md's table of Harbor keys lacks %s", k)
		}
	}
}

// [[artifacts]] tables read as the inline list does (TOML decodes them as
// another type).
func TestArtifactsAsTables(t *testing.T) {
	cfg, warns, errs := ParseConfig("task.toml", []byte("[[artifacts]]\nsource = \"/app/out.txt\"\n[[artifacts]]\nsource = \"/app/logs\"\ndestination = \"run/logs\"\nservice = \"main\"\n"))
	if len(errs) != 0 || len(warns) != 0 {
		t.Fatalf("errors %v, warnings %v", errs, warns)
	}
	if len(cfg.Artifacts) != 2 || cfg.Artifacts[0] != (Artifact{"/app/out.txt", "out.txt"}) || cfg.Artifacts[1] != (Artifact{"/app/logs", "run/logs"}) {
		t.Errorf("artifacts: %+v", cfg.Artifacts)
	}
}
