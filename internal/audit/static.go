package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/t1flow/t1flow/internal/task"
)

var (
	strLit   = regexp.MustCompile(`"([^"\\\n]{1,200})"|'([^'\\\n]{1,200})'`)
	numLit   = regexp.MustCompile(`(?:^|[^\w.])(-?\d{3,}(?:\.\d+)?|-?\d+\.\d{2,})(?:$|[^\w.])`)
	pathLike = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)
)

// Task areas whose paths are requirements; system paths are not.
var taskAreas = []string{"/app", "/srv", "/home", "/etc", "/var", "/opt", "/root", "/data", "/workspace", "/usr/local", "/mnt", "/project"}

func inTaskArea(p string) bool {
	for _, a := range taskAreas {
		if p == a || strings.HasPrefix(p, a+"/") {
			return true
		}
	}
	return false
}

// testFiles reads every file under tests/ except test.sh.
func testFiles(t *task.Task) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(filepath.Join(t.Dir, "tests"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(t.Dir, p)
		if rel != task.TestScriptFile {
			out[rel] = string(b)
		}
		return nil
	})
	return out, err
}

func envFiles(t *task.Task) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(filepath.Join(t.Dir, "environment"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
				rel, _ := filepath.Rel(t.Dir, p)
				out[rel] = string(b)
			}
		}
		return nil
	})
	return out
}

// named reports whether the instruction names p, one of its ancestors (two
// components or more), or its base name, as a whole path.
func named(instr, p string) bool {
	if containsPath(instr, p) {
		return true
	}
	for q := p; strings.Count(q, "/") >= 2; q = filepath.Dir(q) {
		if containsPath(instr, q) {
			return true
		}
	}
	return containsPath(instr, filepath.Base(p)) && len(filepath.Base(p)) >= 4
}

func containsPath(text, p string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], p)
		if j < 0 {
			return false
		}
		end := i + j + len(p)
		if end == len(text) || !isPathChar(text[end]) || text[end] == '/' {
			return true
		}
		i = i + j + 1
	}
}

func isPathChar(c byte) bool {
	return c == '/' || c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// assertLiterals are the expected values tests compare against: string
// literals (6+ chars, not paths) and numbers (3+ digits or 2+ decimals) on
// assert lines.
func assertLiterals(tests map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, src := range tests {
		for _, line := range strings.Split(src, "\n") {
			if !strings.Contains(line, "assert") {
				continue
			}
			for _, m := range strLit.FindAllStringSubmatch(line, -1) {
				s := m[1] + m[2]
				if len(s) >= 6 && !pathLike.MatchString(s) && !seen[s] {
					seen[s] = true
					out = append(out, s)
				}
			}
			for _, m := range numLit.FindAllStringSubmatch(line, -1) {
				if !seen[m[1]] {
					seen[m[1]] = true
					out = append(out, m[1])
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// Analyze reads a task and proves what it can without running it.
func Analyze(t *task.Task, cfg Config) (Static, error) {
	var s Static
	tests, err := testFiles(t)
	if err != nil {
		return s, err
	}
	env := envFiles(t)
	sol, err := os.ReadFile(filepath.Join(t.Dir, task.SolutionFile))
	if err != nil {
		return s, err
	}
	instr := t.Instruction

	// Hidden requirements: paths the tests check that the instruction never names.
	seen := map[string]bool{}
	for _, src := range tests {
		for _, m := range strLit.FindAllStringSubmatch(src, -1) {
			p := strings.TrimRight(m[1]+m[2], "/")
			if !pathLike.MatchString(p) || !inTaskArea(p) || seen[p] {
				continue
			}
			seen[p] = true
			s.CheckedPaths = append(s.CheckedPaths, p)
			if !named(instr, p) {
				s.HiddenPaths = append(s.HiddenPaths, p)
			}
		}
	}
	sort.Strings(s.CheckedPaths)
	sort.Strings(s.HiddenPaths)

	// Test leakage: test code or expected values visible in the environment or instruction.
	df := env[task.DockerfileFile]
	for name, src := range tests {
		base := filepath.Base(name)
		for _, l := range strings.Split(df, "\n") {
			f := strings.Fields(strings.ToUpper(l))
			if len(f) > 0 && (f[0] == "COPY" || f[0] == "ADD") && (strings.Contains(l, base) || strings.Contains(l, "tests")) {
				s.Leaks = append(s.Leaks, fmt.Sprintf("environment/Dockerfile copies test code into the image: %q", strings.TrimSpace(l)))
			}
		}
		for _, line := range strings.Split(src, "\n") {
			line = strings.TrimSpace(line)
			if len(line) < 30 || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "import ") || strings.HasPrefix(line, "from ") {
				continue
			}
			if strings.Contains(instr, line) {
				s.Leaks = append(s.Leaks, fmt.Sprintf("instruction.md contains test code from %s: %q", name, line))
				break
			}
			for ename, econtent := range env {
				if strings.Contains(econtent, line) {
					s.Leaks = append(s.Leaks, fmt.Sprintf("%s contains test code from %s: %q", ename, name, line))
					break
				}
			}
		}
	}
	for _, lit := range assertLiterals(tests) {
		if numLit.MatchString(" " + lit + " ") {
			for ename, econtent := range env {
				if strings.Contains(econtent, lit) {
					s.Leaks = append(s.Leaks, fmt.Sprintf("%s holds the expected value %s that a test asserts", ename, lit))
				}
			}
		}
	}

	// Shortcuts: the solution reads the tests, or writes their literals.
	script := string(sol)
	for _, needle := range []string{"/tests", "/logs/verifier"} {
		if strings.Contains(script, needle) {
			s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh touches %s", needle))
		}
	}
	for name := range tests {
		if b := filepath.Base(name); strings.Contains(script, b) {
			s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh names the test file %s", b))
		}
	}
	envAll := strings.Join(mapValues(env), "\n")
	for _, lit := range assertLiterals(tests) {
		if strings.Contains(script, lit) && !strings.Contains(instr, lit) && !strings.Contains(envAll, lit) {
			s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh writes %q, a value the tests expect, instead of computing it", lit))
		}
	}

	s.Clarity, s.ClarityNotes = clarity(instr, cfg)
	s.Steps = SplitSteps(script)
	s.Mutants = Mutants(script, cfg.Mutants)
	return s, nil
}

func mapValues(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

var vague = regexp.MustCompile(`(?i)\b(TODO|TBD|FIXME|somehow|etc\.?)\b|\?\?\?`)

// clarity is a heuristic in [0, 1]: a sane length, concrete paths or
// commands, and no placeholders.
func clarity(instr string, cfg Config) (float64, []string) {
	var notes []string
	score := 1.0
	n := len(strings.TrimSpace(instr))
	if n < cfg.MinInstructionChars {
		score -= 0.5
		notes = append(notes, fmt.Sprintf("instruction is short (%d chars)", n))
	}
	if n > cfg.MaxInstructionChars {
		score -= 0.3
		notes = append(notes, fmt.Sprintf("instruction is long (%d chars)", n))
	}
	if !strings.Contains(instr, "/") && !strings.Contains(instr, "`") {
		score -= 0.3
		notes = append(notes, "instruction names no path or command")
	}
	if m := vague.FindString(instr); m != "" {
		score -= 0.3
		notes = append(notes, fmt.Sprintf("instruction has a placeholder or vague term: %q", m))
	}
	if len(notes) == 0 {
		notes = append(notes, fmt.Sprintf("%d chars, names concrete paths, no placeholders", n))
	}
	return max(score, 0), notes
}
