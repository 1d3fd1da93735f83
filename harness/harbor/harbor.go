// Package harbor reads Terminus-2's texts and rules from the installed harbor
// package (scripts/ensure-harbor-env.sh builds its environment) through
// spec.py, and runs Harbor's own code for the differential tests.
package harbor

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/internal/config"
)

//go:embed spec.py
var specPy []byte

// SpecFile is where ensure-harbor-env.sh leaves spec.py's output, in the
// interpreter's venv, named by a hash of spec.py: importing harbor (litellm)
// takes ~10 s of CPU, so a worker reads this instead of running it.
func SpecFile() string {
	h := sha256.Sum256(specPy)
	return "t1flow-harbor-spec-" + hex.EncodeToString(h[:])[:16] + ".json"
}

// Python is Harbor's interpreter: $T1FLOW_HARBOR_PYTHON, else
// $T1FLOW_HOME/harborenv/bin/python.
func Python() string {
	if p := os.Getenv("T1FLOW_HARBOR_PYTHON"); p != "" {
		return p
	}
	return filepath.Join(config.Home(), "harborenv", "bin", "python")
}

// Installed says whether Harbor's interpreter is there: nil, or an error
// naming the path and how to install it.
func Installed() error {
	if _, err := os.Stat(Python()); err != nil {
		return fmt.Errorf("harbor: %s is missing (run scripts/ensure-harbor-env.sh or make harborenv, or set T1FLOW_HARBOR_PYTHON to a Python with harbor installed)", Python())
	}
	return nil
}

// Run runs spec.py in mode with stdin under Harbor's interpreter and returns
// its stdout.
func Run(ctx context.Context, mode string, stdin []byte) ([]byte, error) {
	if err := Installed(); err != nil {
		return nil, err
	}
	py := Python()
	f, err := os.CreateTemp("", "t1flow-harbor-spec-*.py")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(specPy); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	cmd := exec.CommandContext(ctx, py, f.Name(), mode)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), "LITELLM_LOCAL_MODEL_COST_MAP=True", "PYTHONHASHSEED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("harbor: %s spec.py %s: %v: %s", py, mode, err, strings.TrimSpace(lastLines(stderr.String(), 5)))
	}
	return out, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

var (
	mu     sync.Mutex
	loaded *harness.Spec
)

// Load is the Terminus-2 spec of the installed Harbor, once per process:
// the env's SpecFile when it is as new as the interpreter's env, else
// spec.py's output.
func Load(ctx context.Context) (*harness.Spec, error) {
	mu.Lock()
	defer mu.Unlock()
	if loaded != nil {
		return loaded, nil
	}
	cached := filepath.Join(filepath.Dir(filepath.Dir(Python())), SpecFile())
	raw, err := os.ReadFile(cached)
	if err != nil {
		if raw, err = Run(ctx, "spec", nil); err != nil {
			return nil, err
		}
	}
	var s harness.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("harbor: spec.py's output: %v", err)
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	loaded = &s
	return loaded, nil
}
