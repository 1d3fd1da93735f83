package audit

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/t1flow/t1flow/internal/task"
)

var (
	strLit   = regexp.MustCompile(`"([^"\\\n]{1,200})"|'([^'\\\n]{1,200})'`)
	numLit   = regexp.MustCompile(`(?:^|[^\w.])(-?\d{3,}(?:\.\d+)?|-?\d+\.\d{2,})(?:$|[^\w.])`)
	pathLike = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)
	alnum    = regexp.MustCompile(`[A-Za-z0-9]`)
)

// Task areas whose paths are requirements; system paths are not.
var taskAreas = []string{"/app", "/srv", "/home", "/etc", "/var", "/opt", "/root", "/data", "/workspace", "/usr/local", "/mnt", "/project", "/backup", "/workdir"}

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

// TestSources are every file under tests/, test.sh included.
func TestSources(t *task.Task) (map[string]string, error) {
	tests, err := testFiles(t)
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(filepath.Join(t.Dir, task.TestScriptFile)); err == nil {
		tests[task.TestScriptFile] = string(b)
	}
	return tests, nil
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
	// an ancestor directory named as such (not as the start of a sibling's path)
	for q := filepath.Dir(p); strings.Count(q, "/") >= 2; q = filepath.Dir(q) {
		if namesDir(instr, q) {
			return true
		}
	}
	return containsPath(instr, filepath.Base(p)) && len(filepath.Base(p)) >= 4
}

// namesDir: text names directory d by itself (`/app/out`, `/app/out/`),
// not only inside a longer path.
func namesDir(text, d string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], d)
		if j < 0 {
			return false
		}
		end := i + j + len(d)
		if end < len(text) && text[end] == '/' {
			end++
		}
		if pathEndsAt(text, end) {
			return true
		}
		i = i + j + 1
	}
}

func containsPath(text, p string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], p)
		if j < 0 {
			return false
		}
		end := i + j + len(p)
		if pathEndsAt(text, end) || text[end] == '/' {
			return true
		}
		i = i + j + 1
	}
}

// pathEndsAt reports whether a path in text ends at end, as a reader reads
// it: what follows is no path character, or a full stop (or an ellipsis)
// that ends the sentence: "write /app/out.txt." names /app/out.txt, while
// /app/out.txt.bak is another file. Quotes and backticks end a path too.
func pathEndsAt(text string, end int) bool {
	for end < len(text) && text[end] == '.' {
		end++
	}
	return end == len(text) || !isPathChar(text[end])
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

	// Hidden requirements: outputs the tests assert on that the instruction
	// never names. What the tests only read (inputs) is not a requirement.
	withScript, err := TestSources(t)
	if err != nil {
		return s, err
	}
	s.Checks = ParseChecks(withScript)
	s.Outputs, s.Inputs = classify(s.Checks, env, string(sol), instr)
	for _, o := range s.Outputs {
		s.CheckedPaths = append(s.CheckedPaths, o.Path)
		if !o.Named {
			s.HiddenPaths = append(s.HiddenPaths, o.Path)
			s.Hidden = append(s.Hidden, fmt.Sprintf("%s asserts on %s (%s), an output the instruction never names: %s", o.Checks[0], o.Path, o.Kind, o.Text))
		}
	}
	s.Agents = buildAgents(s.Outputs, s.Inputs, instr, string(sol))

	s.Leaks = staticLeaks(tests, env, instr)

	// Shortcuts: the solution reads the tests, or writes their literals.
	script := string(sol)
	for _, needle := range []string{"/tests", "/logs/verifier"} {
		if strings.Contains(script, needle) {
			s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh touches %s", needle))
		}
	}
	for name, src := range tests {
		if b := filepath.Base(name); strings.Contains(script, b) && isTestCode(src) {
			s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh names the test file %s", b))
		}
	}
	envAll := strings.Join(mapValues(env), "\n")
	for _, lit := range assertLiterals(tests) {
		if hasToken(script, lit) && !strings.Contains(instr, lit) && !strings.Contains(envAll, lit) {
			s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh writes %q, a value the tests expect, instead of computing it", lit))
		}
	}

	// Only outputs the instruction asks for: a value for an output it never
	// names is that hidden requirement, not a shortcut.
	for _, o := range s.Outputs {
		if !o.Named {
			continue
		}
		for _, v := range o.Values {
			long := len(v) >= 6 || numLit.MatchString(" "+v+" ")
			if long && hasToken(script, v) && !strings.Contains(instr, v) && !strings.Contains(envAll, v) && !strings.Contains(strings.Join(s.Shortcuts, "\n"), strconvQuote(v)) {
				s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh writes %q, the value %s expects for %s, instead of computing it", v, o.Checks[0], o.Path))
			}
			if hardCodes(script, v, o.Path) && !strings.Contains(instr, v) {
				s.Shortcuts = append(s.Shortcuts, fmt.Sprintf("solution/solve.sh writes %q into %s, the value %s expects, instead of computing it", v, o.Path, o.Checks[0]))
			}
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

// hardCodes: the solution writes the literal v into path p (or a file of
// its base name) on one line, e.g. `echo 17 > /app/count.txt`, or, for
// values long enough not to be a coincidence, anywhere at all.
func hardCodes(script, v, p string) bool {
	if len(v) >= 6 || numLit.MatchString(" "+v+" ") || !alnum.MatchString(v) {
		return false // the literal check above covers long values
	}
	re := regexp.MustCompile(`(echo|printf)\b[^\n>]*(^|[\s'"])` + regexp.QuoteMeta(v) + `($|[\s'"\\])[^\n>]*>>?\s*["']?(` + regexp.QuoteMeta(p) + `|` + regexp.QuoteMeta(filepath.Base(p)) + `)`)
	return re.MatchString(script)
}

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }

// hasToken: v occurs in s and, when v is a number, not as part of a longer
// number (644 in `chmod 0644`, 2024 in 12024).
func hasToken(s, v string) bool {
	if !numLit.MatchString(" " + v + " ") {
		return strings.Contains(s, v)
	}
	return regexp.MustCompile(`(^|[^\w.])` + regexp.QuoteMeta(v) + `($|[^\w.])`).MatchString(s)
}

// staticLeaks is the test leakage that reading proves: test code in the
// image or the instruction.
func staticLeaks(tests, env map[string]string, instr string) []string {
	var leaks []string
	// Test leakage that reading proves: test code in the image or the
	// instruction. Only what the built image holds counts (the Dockerfile
	// and the context files it copies), and only test code (a generator the
	// image and the tests both run is a shared input). Expected values in
	// the image are found by the leak seeker, which exploits them
	// (Agents.Leak).
	image := imageFiles(env, env[task.DockerfileFile])
	for _, name := range slices.Sorted(maps.Keys(tests)) {
		src := tests[name]
		if !isTestCode(src) {
			continue
		}
		for _, iname := range slices.Sorted(maps.Keys(image)) {
			if iname != task.DockerfileFile && filepath.Base(iname) == filepath.Base(name) && isTestCode(image[iname]) {
				leaks = append(leaks, fmt.Sprintf("environment/Dockerfile copies test code into the image: %s (a copy of %s)", iname, name))
			}
		}
		for _, line := range strings.Split(src, "\n") {
			line = strings.TrimSpace(line)
			if len(line) < 30 || !strings.Contains(line, "assert") {
				continue
			}
			if strings.Contains(instr, line) {
				leaks = append(leaks, fmt.Sprintf("instruction.md contains test code from %s: %q", name, line))
				break
			}
			for _, iname := range slices.Sorted(maps.Keys(image)) {
				if strings.Contains(image[iname], line) {
					leaks = append(leaks, fmt.Sprintf("%s, in the image, contains test code from %s: %q", iname, name, line))
					break
				}
			}
		}
	}
	return leaks
}
