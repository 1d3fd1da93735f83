package audit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runSeeker runs inventory-lookup's leak seeker with the host's python3 on
// an image tree under root, and returns what it printed and what it wrote to
// the task's output (nil when it wrote nothing).
func runSeeker(t *testing.T, root string) (string, []byte) {
	t.Helper()
	s := analyze(t, filepath.Join("../../bench/audit-tasks", "inventory-lookup"))
	if s.Agents.Leak == "" {
		t.Fatal("inventory-lookup has no leak seeker: its test asserts a literal")
	}
	return runScript(t, s.Agents.Leak, root, "/app/fruit_total.txt")
}

// runScript runs a leak seeker script on the tree under root.
func runScript(t *testing.T, leak, root, output string) (string, []byte) {
	t.Helper()
	// The spec's first line, then the root the seeker searches.
	script := strings.Replace(leak, "\n"+leakSeeker, "\nSPEC[\"root\"] = "+pyQuote(root)+"\n"+leakSeeker, 1)
	if script == leak {
		t.Fatal("could not set the seeker's root")
	}
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("leak seeker: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(root, output))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(out), b
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeakSeekerSearchesOnlyTheTasksFiles: inventory-lookup expects 42, and
// plums=42 is a line of its own input. Neither the input nor installed
// packages' source (where a line "42" or "x = 42" is common) is a leak; a
// file the task left holding the answer is, and so is a long answer (a
// digest) hidden in a package tree.
func TestLeakSeekerSearchesOnlyTheTasksFiles(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this host")
	}
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"app/inventory.txt": "apples=12\nbananas=7\npears=30\nplums=42\n",
		"opt/venv/lib/python3.11/site-packages/pkg/consts.py": "ANSWER = 42\n",
		"srv/app/node_modules/x/index.js":                     "42\n",
		"usr/lib/python3/ssl.py":                              "x = 42\n",
	})
	out, b := runSeeker(t, root)
	if b != nil || strings.Contains(out, "leak:") {
		t.Fatalf("a sound image: the seeker wrote %q and said %q", b, out)
	}

	writeTree(t, root, map[string]string{"app/.cache/expected": "42\n"})
	out, b = runSeeker(t, root)
	if strings.TrimSpace(string(b)) != "42" || !strings.Contains(out, "/app/.cache/expected") {
		t.Fatalf("a left answer: the seeker wrote %q and said %q", b, out)
	}

	// A long value is still sought inside package trees.
	digest := "b0a1937136c4e2f9"
	leak := leakScript([]Output{{Path: "/app/digest.txt", Kind: "file", Values: []string{digest}}}, nil, "", "")
	root = t.TempDir()
	writeTree(t, root, map[string]string{"opt/venv/lib/python3.11/site-packages/pkg/cache.json": `{"digest": "` + digest + `"}` + "\n"})
	out, b = runScript(t, leak, root, "app/digest.txt")
	if strings.TrimSpace(string(b)) != digest || !strings.Contains(out, "site-packages/pkg/cache.json") {
		t.Fatalf("a digest in site-packages: the seeker wrote %q and said %q", b, out)
	}
}
