package task

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTask makes a minimal valid task, with overrides by relative path.
func writeTask(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo-task")
	base := map[string]string{
		InstructionFile: "Do the thing.\n",
		ConfigFile:      "version = \"1.0\"\n[metadata]\ncategory = \"scripting\"\ndifficulty = \"easy\"\n",
		DockerfileFile:  "FROM ubuntu:22.04\n",
		SolutionFile:    "#!/bin/bash\necho done\n",
		TestScriptFile:  "#!/bin/bash\nexit 0\n",
	}
	for k, v := range files {
		base[k] = v
	}
	for rel, content := range base {
		if content == "<none>" {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadValidTask(t *testing.T) {
	dir := writeTask(t, nil)
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Name != "demo-task" || tk.Config.Category != "scripting" || tk.Config.Difficulty != "easy" {
		t.Fatalf("got name %q category %q difficulty %q", tk.Name, tk.Config.Category, tk.Config.Difficulty)
	}
	if tk.Config.AgentTimeoutSec != DefaultAgentTimeoutSec || tk.Config.MemoryMB != DefaultMemoryMB {
		t.Fatalf("defaults not applied: %+v", tk.Config)
	}
	if len(tk.ID) != 16 {
		t.Fatalf("ID %q is not 16 hex digits", tk.ID)
	}
}

func TestExampleTasksAreValid(t *testing.T) {
	ts, err := LoadAll("../../examples/tasks")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) < 8 {
		t.Fatalf("want at least 8 example tasks, got %d", len(ts))
	}
	cats := map[string]bool{}
	for _, tk := range ts {
		if tk.Config.Category == "" || tk.Config.Difficulty == "" {
			t.Errorf("%s: metadata.category and metadata.difficulty are required for examples", tk.Name)
		}
		cats[tk.Config.Category] = true
		for _, w := range tk.Warnings {
			// FROM ubuntu:22.04 is approximate (bookworm) and says so.
			if !strings.Contains(w, "FROM ubuntu:22.04 is built on t1flow's bookworm base") {
				t.Errorf("%s: unexpected warning %s", tk.Name, w)
			}
		}
	}
	if len(cats) < 6 {
		t.Fatalf("want at least 6 categories, got %v", cats)
	}
}

func TestMalformedTasksNameFileAndField(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  []string // substrings the error must contain
	}{
		{"missing solution", map[string]string{SolutionFile: "<none>"}, []string{"solution/solve.sh", "missing"}},
		{"missing tests", map[string]string{TestScriptFile: "<none>"}, []string{"tests/test.sh", "missing"}},
		{"bad toml", map[string]string{ConfigFile: "version = \n[agent\n"}, []string{"task.toml", "invalid TOML", "line"}},
		{"wrong type", map[string]string{ConfigFile: "[agent]\ntimeout_sec = \"soon\"\n"}, []string{"task.toml", "agent.timeout_sec", "must be a number"}},
		{"negative timeout", map[string]string{ConfigFile: "[verifier]\ntimeout_sec = -5\n"}, []string{"task.toml", "verifier.timeout_sec", "-5", "between"}},
		{"huge memory", map[string]string{ConfigFile: "[environment]\nmemory_mb = 99999999\n"}, []string{"environment.memory_mb"}},
		{"bad bool", map[string]string{ConfigFile: "[environment]\nallow_internet = \"yes\"\n"}, []string{"environment.allow_internet", "true or false"}},
		{"no FROM", map[string]string{DockerfileFile: "RUN echo hi\n"}, []string{"environment/Dockerfile", "FROM"}},
		{"empty instruction", map[string]string{InstructionFile: ""}, []string{"instruction.md", "empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeTask(t, c.files))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestSeveralProblemsReportedTogether(t *testing.T) {
	_, err := Load(writeTask(t, map[string]string{SolutionFile: "<none>", ConfigFile: "[agent]\ntimeout_sec = 0\n"}))
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("want 2 errors, got %v", err)
	}
}

func TestUnknownKeysAreWarnings(t *testing.T) {
	tk, err := Load(writeTask(t, map[string]string{ConfigFile: "[metadata]\nauthor = \"x\"\nanything = 1\n[agent]\nflavour = \"mint\"\n[extra]\nk = 1\n"}))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(tk.Warnings, "\n")
	for _, w := range []string{"agent.flavour", "extra"} {
		if !strings.Contains(got, w) {
			t.Errorf("warnings %q do not name %s", got, w)
		}
	}
	if strings.Contains(got, "author") {
		t.Errorf("metadata is free-form, got warning %q", got)
	}
}

func TestHashFollowsContent(t *testing.T) {
	dir := writeTask(t, nil)
	a, _ := Hash(dir)
	b, _ := Hash(dir)
	if a != b {
		t.Fatal("hash is not stable")
	}
	os.WriteFile(filepath.Join(dir, SolutionFile), []byte("#!/bin/bash\necho other\n"), 0o644)
	c, _ := Hash(dir)
	os.Chmod(filepath.Join(dir, SolutionFile), 0o755)
	d, _ := Hash(dir)
	if a == c || c == d {
		t.Fatalf("hash ignores content or exec bit: %s %s %s", a, c, d)
	}
}

func TestTarRoundTrip(t *testing.T) {
	dir := writeTask(t, map[string]string{"tests/data/input.txt": "payload"})
	os.Chmod(filepath.Join(dir, TestScriptFile), 0o755)
	var buf bytes.Buffer
	if err := Tar(dir, "", "", &buf); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := Untar(&buf, out); err != nil {
		t.Fatal(err)
	}
	a, _ := Hash(dir)
	b, _ := Hash(out)
	if a != b {
		t.Fatalf("round trip changed the task: %s != %s", a, b)
	}
	st, _ := os.Stat(filepath.Join(out, TestScriptFile))
	if st.Mode()&0o100 == 0 {
		t.Fatal("exec bit lost")
	}
}

func TestUntarRefusesEscape(t *testing.T) {
	var buf bytes.Buffer
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	if err := Tar(dir, "", "../", &buf); err != nil {
		t.Fatal(err)
	}
	if err := Untar(&buf, t.TempDir()); err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Fatalf("want an escape error, got %v", err)
	}
}

func TestLoadAllReportsEveryBadTask(t *testing.T) {
	root := t.TempDir()
	good := writeTask(t, nil)
	os.Rename(good, filepath.Join(root, "good"))
	bad := writeTask(t, map[string]string{ConfigFile: "[agent]\ntimeout_sec = []\n"})
	os.Rename(bad, filepath.Join(root, "bad"))
	_, err := LoadAll(root)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "bad", "task.toml")) {
		t.Fatalf("want the bad task's file named, got %v", err)
	}
}
