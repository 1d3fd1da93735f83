package audit

import (
	"regexp"
	"sort"
	"strings"
)

// Check is one assertion block of the tests: a pytest function, or one line
// of a shell verifier (tests/test.sh or a .sh/.bats file), with the task
// paths it touches and the literal values it compares against.
type Check struct {
	Where  string   `json:"where"`            // tests/test_outputs.py::test_sum, tests/test.sh:12
	Text   string   `json:"text"`             // the first assertion line, for evidence
	Paths  []string `json:"paths,omitempty"`  // task paths it reads or runs
	Exec   []string `json:"exec,omitempty"`   // of those, the ones it runs as programs
	Writes []string `json:"writes,omitempty"` // of those, the ones the test itself writes (fixtures)
	Values []string `json:"values,omitempty"` // literal expected values on its assertion lines
}

var (
	pyDef      = regexp.MustCompile(`^def\s+(\w+)\s*\(`)
	pyAssign   = regexp.MustCompile(`^([A-Za-z_]\w*)\s*=\s*(.+)$`)
	ident      = regexp.MustCompile(`[A-Za-z_]\w*`)
	shPath     = regexp.MustCompile(`(?:^|[\s"'=(<>:])(/[A-Za-z0-9._/-]+)`)
	pyProgram  = regexp.MustCompile(`(\[\s*|["'](?:bash|sh|python3?)["']\s*,\s*|os\.access\(\s*|\(\s*)("/[^"]+"|'/[^']+'|[A-Za-z_]\w*)`)
	pyExecCall = regexp.MustCompile(`subprocess\.\w+\(|os\.system\(|os\.access\(|check_output\(|os\.popen\(`)
	pyWrite    = regexp.MustCompile(`open\(\s*([A-Za-z_]\w*|"[^"]+"|'[^']+')\s*,\s*["'][wa]`)
	shCompare  = regexp.MustCompile(`(?:==?|!=|-eq|-ne|-ge|-le|-gt|-lt)\s+("[^"]*"|'[^']*'|[^\s\]"';|&)]+)`)
	callArgs   = regexp.MustCompile(`[\w.\]]\([^()]*\)`)
	numTok     = regexp.MustCompile(`(?:^|[\s(,=<>!:]|[^\w\])]\[)(-?\d+(?:\.\d+)?)(?:$|[\s\]),:])`)
)

// ParseChecks finds the assertion blocks of every test file (path → source).
func ParseChecks(tests map[string]string) []Check {
	var out []Check
	names := make([]string, 0, len(tests))
	for n := range tests {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".py"):
			out = append(out, pyChecks(n, tests[n])...)
		case strings.HasSuffix(n, ".sh") || strings.HasSuffix(n, ".bats"):
			out = append(out, shChecks(n, tests[n])...)
		}
	}
	return out
}

// pyChecks: one check per test function. Module-level constants and helper
// functions lend their paths to the tests that name them.
func pyChecks(file, src string) []Check {
	lines := strings.Split(src, "\n")
	type block struct {
		name  string
		lines []string
	}
	var blocks []block
	module := map[string][]string{} // constant or helper name → its lines
	cur := -1
	helper := ""
	for _, l := range lines {
		if m := pyDef.FindStringSubmatch(l); m != nil {
			cur, helper = -1, ""
			if strings.HasPrefix(m[1], "test") {
				blocks = append(blocks, block{name: m[1]})
				cur = len(blocks) - 1
			} else {
				helper = m[1]
				module[helper] = append(module[helper], l)
			}
			continue
		}
		indented := strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")
		if !indented && strings.TrimSpace(l) != "" {
			cur, helper = -1, ""
			if m := pyAssign.FindStringSubmatch(l); m != nil {
				module[m[1]] = append(module[m[1]], m[2])
			}
			continue
		}
		if cur >= 0 {
			blocks[cur].lines = append(blocks[cur].lines, l)
		} else if helper != "" {
			module[helper] = append(module[helper], l)
		}
	}
	var out []Check
	for _, b := range blocks {
		c := Check{Where: file + "::" + b.name}
		body := strings.Join(b.lines, "\n")
		// the module-level names the body uses, one level deep
		var lent []string
		seen := map[string]bool{}
		queue := []string{body}
		for len(queue) > 0 {
			text := queue[0]
			queue = queue[1:]
			for _, id := range ident.FindAllString(text, -1) {
				if defs, ok := module[id]; ok && !seen[id] {
					seen[id] = true
					lent = append(lent, defs...)
					queue = append(queue, strings.Join(defs, "\n"))
				}
			}
		}
		for _, l := range append(append([]string{}, b.lines...), lent...) {
			c.Paths = appendNew(c.Paths, literalPaths(l)...)
			if pyExecCall.MatchString(l) {
				for _, m := range pyProgram.FindAllStringSubmatch(l, -1) {
					c.Exec = appendNew(c.Exec, resolvePaths(strings.Trim(m[2], `"'`), module)...)
				}
			}
			if m := pyWrite.FindStringSubmatch(l); m != nil {
				c.Writes = appendNew(c.Writes, resolvePaths(strings.Trim(m[1], `"'`), module)...)
			}
		}
		for _, l := range b.lines {
			if strings.HasPrefix(strings.TrimSpace(l), "assert") {
				if c.Text == "" {
					c.Text = strings.TrimSpace(l)
				}
				c.Values = appendNew(c.Values, pyValues(l)...)
			}
		}
		if c.Text == "" {
			c.Text = "def " + b.name
		}
		out = append(out, c)
	}
	return out
}

// resolvePaths: the task paths a literal or module-level name stands for.
func resolvePaths(s string, module map[string][]string) []string {
	if strings.HasPrefix(s, "/") {
		return literalPaths(`"` + s + `"`)
	}
	var out []string
	for _, l := range module[s] {
		out = append(out, literalPaths(l)...)
	}
	return out
}

// pyValues are the literals an assert line compares against: what is left
// of the line once every call's arguments are removed (the reads and the
// commands), minus paths and formatting strings.
func pyValues(line string) []string {
	l := strings.TrimSpace(line)
	for {
		n := callArgs.ReplaceAllStringFunc(l, func(m string) string { return m[:1] + "()" })
		if n == l {
			break
		}
		l = n
	}
	var out []string
	if strings.Contains(l, "returncode") {
		l = numTok.ReplaceAllString(l, " ") // exit statuses are not outputs
	}
	for _, m := range strLit.FindAllStringSubmatch(l, -1) {
		s := m[1] + m[2]
		if alnum.MatchString(s) && !pathLike.MatchString(s) {
			out = appendNew(out, s)
		}
	}
	stripped := strLit.ReplaceAllString(l, `""`)
	for _, m := range numTok.FindAllStringSubmatch(stripped, -1) {
		out = appendNew(out, m[1])
	}
	return out
}

// shChecks: one check per line that tests something.
func shChecks(file, src string) []Check {
	var out []Check
	for i, raw := range strings.Split(src, "\n") {
		l := strings.TrimSpace(raw)
		if l == "" || strings.HasPrefix(l, "#") || !shTests(l) {
			continue
		}
		c := Check{Where: file + ":" + itoa(i+1), Text: l}
		for _, m := range shPath.FindAllStringSubmatch(l, -1) {
			p := strings.TrimRight(m[1], "/.")
			if inTaskArea(p) {
				c.Paths = appendNew(c.Paths, p)
				if shRuns(l, p) {
					c.Exec = appendNew(c.Exec, p)
				}
				if regexp.MustCompile(`>>?\s*` + regexp.QuoteMeta(p) + `(\s|$)`).MatchString(l) {
					c.Writes = appendNew(c.Writes, p)
				}
			}
		}
		for _, m := range shCompare.FindAllStringSubmatch(l, -1) {
			v := strings.Trim(m[1], `"'`)
			if alnum.MatchString(v) && !strings.HasPrefix(v, "$") && !pathLike.MatchString(v) {
				c.Values = appendNew(c.Values, v)
			}
		}
		for _, m := range regexp.MustCompile(`grep\s+(?:-\w+\s+)*("[^"]+"|'[^']+')`).FindAllStringSubmatch(l, -1) {
			c.Values = appendNew(c.Values, strings.Trim(m[1], `"'`))
		}
		if len(c.Paths) > 0 || len(c.Values) > 0 {
			out = append(out, c)
		}
	}
	return out
}

func shTests(l string) bool {
	for _, k := range []string{"[ ", "[[ ", "test ", "grep ", "cmp ", "diff ", "check ", "assert"} {
		if strings.Contains(l, k) {
			return true
		}
	}
	return false
}

// shRuns: the line runs p as a program (not as test's or cat's argument).
func shRuns(l, p string) bool {
	q := regexp.QuoteMeta(p)
	return regexp.MustCompile(`(^|\$\(|[;&|]\s*|\bcheck\s+\S+\s+|\b(bash|sh|python3?)\s+)`+q+`(\s|\)|$)`).MatchString(l) ||
		regexp.MustCompile(`-x\s+`+q).MatchString(l)
}

// literalPaths are the task-area paths quoted on a line.
func literalPaths(l string) []string {
	var out []string
	for _, m := range strLit.FindAllStringSubmatch(l, -1) {
		p := strings.TrimRight(m[1]+m[2], "/")
		if pathLike.MatchString(p) && inTaskArea(p) {
			out = appendNew(out, p)
		}
	}
	return out
}

func appendNew(xs []string, ys ...string) []string {
	for _, y := range ys {
		if !contains(xs, y) {
			xs = append(xs, y)
		}
	}
	return xs
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
