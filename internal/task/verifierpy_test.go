package task

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tb2TestSh is Terminal-Bench 2's test.sh as its tasks ship it.
const tb2TestSh = `#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx \
  -p 3.13 \
  -w pytest==8.4.1 \
  -w pytest-json-ctrf==0.3.5 \
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
`

func TestRequestedPython(t *testing.T) {
	for _, c := range []struct {
		script, want string
		line         int
	}{
		{tb2TestSh, "3.13", 6},
		{"uvx --python=3.11 pytest /tests\n", "3.11", 1},
		{"cd /app && uv run --python 3.12 pytest\n", "3.12", 1},
		{"uv tool run -p3.13 pytest\n", "3.13", 1},
		{"/root/.local/bin/uvx -w pytest -p 'cpython-3.13.5' pytest\n", "3.13", 1},
		{"uv venv --python python3.10 /tmp/v\n", "3.10", 1},
		{"uv pip install -p 3.13 -r req.txt\n", "3.13", 1},
		{"if true; then uvx -p \"3.13\" pytest; fi\n", "3.13", 1},
		// pytest's -p (a plugin) belongs to the command uvx runs, not to uv.
		{"uvx -w pytest==8.4.1 pytest -p no:cacheprovider -p 3.13 /tests\n", "", 0},
		{"python3 -m pytest -p 3.13 /tests\n", "", 0},
		{"# uvx -p 3.13 pytest\npytest /tests\n", "", 0},
		{"uvx pytest /tests # -p 3.13\n", "", 0},
		{"echo 1 > /logs/verifier/reward.txt\n", "", 0},
		{"uvx -p pypy pytest\n", "", 0},
		{"python3 -m pytest /tests\nuvx -p 3.11 ruff check\n", "3.11", 2},
	} {
		got, line := RequestedPython(c.script)
		if got != c.want || line != c.line {
			t.Errorf("RequestedPython(%q) = %q at line %d, want %q at %d", c.script, got, line, c.want, c.line)
		}
	}
}

func TestVerifierBase(t *testing.T) {
	for want, exp := range map[string][2]string{
		"3.13": {BaseTrixie, ""},
		"3.11": {BaseBookworm, ""},
		"3.12": {BaseTrixie, "Python 3.13 (Debian trixie's) stands in for 3.12"},
		"3.14": {BaseTrixie, "Python 3.13 (Debian trixie's) stands in for 3.14"},
		"3.9":  {BaseBookworm, "Python 3.11 (Debian bookworm's) stands in for 3.9"},
		"":     {"", ""},
		"2.7":  {"", ""},
	} {
		b, approx := VerifierBase(want)
		if b != exp[0] || approx != exp[1] {
			t.Errorf("VerifierBase(%q) = %q, %q; want %q, %q", want, b, approx, exp[0], exp[1])
		}
	}
}

// TestLoadReadsTheVerifierPython: Load records test.sh's request, and warns,
// naming test.sh and its line, when no toolchain has that Python.
func TestLoadReadsTheVerifierPython(t *testing.T) {
	tk, err := Load(writeTask(t, map[string]string{TestScriptFile: tb2TestSh, DockerfileFile: "FROM debian:12\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Config.VerifierPython != "3.13" || len(tk.Warnings) != 0 {
		t.Fatalf("VerifierPython %q, warnings %q; want 3.13 and none", tk.Config.VerifierPython, tk.Warnings)
	}
	dir := writeTask(t, map[string]string{TestScriptFile: "#!/bin/bash\n\nuvx -p 3.12 pytest /tests\n"})
	tk, err = Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(tk.Warnings, "\n")
	if tk.Config.VerifierPython != "3.12" || !strings.Contains(w, filepath.Join(dir, TestScriptFile)+":3:") || !strings.Contains(w, "3.13 (Debian trixie's) stands in for 3.12") {
		t.Fatalf("VerifierPython %q, warnings %q", tk.Config.VerifierPython, w)
	}
	os.WriteFile(filepath.Join(dir, TestScriptFile), []byte("#!/bin/bash\npython3 -m pytest /tests\n"), 0o644)
	if tk, err = Load(dir); err != nil || tk.Config.VerifierPython != "" {
		t.Fatalf("no request: VerifierPython %q, %v", tk.Config.VerifierPython, err)
	}
}
