package audit

import (
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Output is a path the tests assert about that the agent must produce or
// change: a requirement. Inputs (made by the environment, left alone by the
// reference solution) and fixtures the tests write themselves are not.
type Output struct {
	Path   string   `json:"path"`
	Kind   string   `json:"kind"` // file, dir or exec
	Named  bool     `json:"named"`
	Checks []string `json:"checks"`           // where the tests assert on it
	Text   string   `json:"text"`             // the first such assertion
	Values []string `json:"values,omitempty"` // literals those assertions compare against
}

// classify splits the tests' paths into outputs (requirements) and inputs.
func classify(checks []Check, env map[string]string, solution, instr string) ([]Output, []string) {
	// Only the Dockerfile says what the image holds; files it COPYs count by
	// their destination (a COPYed file's own text may mention anything).
	envText := env["environment/Dockerfile"]
	copied := copyDests(envText)
	byPath := map[string]*Output{}
	var inputs []string
	fixture := map[string]bool{}
	for _, c := range checks {
		for _, w := range c.Writes {
			fixture[w] = true
		}
	}
	for _, c := range checks {
		for _, p := range c.Paths {
			if fixture[p] {
				continue
			}
			if madeByEnv(p, envText, copied) && !writes(solution, p) {
				inputs = appendNew(inputs, p)
				continue
			}
			o := byPath[p]
			if o == nil {
				o = &Output{Path: p, Kind: "file", Named: named(instr, p), Text: c.Text}
				byPath[p] = o
			}
			o.Checks = appendNew(o.Checks, c.Where)
			o.Values = appendNew(o.Values, c.Values...)
			if contains(c.Exec, p) {
				o.Kind = "exec"
			}
		}
	}
	var outs []Output
	for p, o := range byPath {
		if o.Kind == "file" && (filepath.Ext(p) == "" && hasChild(byPath, p) || isDirCheck(checks, p)) {
			o.Kind = "dir"
		}
		outs = append(outs, *o)
	}
	sort.Slice(outs, func(i, j int) bool { return outs[i].Path < outs[j].Path })
	sort.Strings(inputs)
	return outs, inputs
}

// madeByEnv: the Dockerfile (or a file it builds from) names the path or
// its directory and base name, or COPYs something to it or above it.
func madeByEnv(p, envText string, copied []string) bool {
	if strings.Contains(envText, p) {
		return true
	}
	for _, d := range copied {
		if p == d || strings.HasPrefix(p, strings.TrimRight(d, "/")+"/") {
			return true
		}
	}
	dir, base := filepath.Dir(p), filepath.Base(p)
	return strings.Contains(envText, dir) && regexp.MustCompile(`(^|[\s/'">])`+regexp.QuoteMeta(base)+`($|[\s'";&|)])`).MatchString(envText)
}

func copyDests(df string) []string {
	var out []string
	for _, l := range strings.Split(df, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && (strings.EqualFold(f[0], "COPY") || strings.EqualFold(f[0], "ADD")) && strings.HasPrefix(f[len(f)-1], "/") {
			out = append(out, f[len(f)-1])
		}
	}
	return out
}

// writes: the solution writes, changes or works inside p (or a file of that
// base name, as solutions often cd first).
func writes(solution, p string) bool {
	for _, x := range []string{p, filepath.Base(p)} {
		q := regexp.QuoteMeta(x)
		pat := `(>>?|\btee\s+(-a\s+)?|\b(cp|mv|install|ln|touch|mkdir|chmod|chown|rm|truncate|cd|sed\s+-i|git\s+-C)\b[^\n;|&]*\s)["']?` + q + `["']?(\s|$|[;&|)])` +
			`|open\(["']` + q + `["'],\s*["'][wa]`
		if regexp.MustCompile(pat).MatchString(solution) {
			return true
		}
	}
	return false
}

func hasChild(m map[string]*Output, p string) bool {
	for q := range m {
		if strings.HasPrefix(q, p+"/") {
			return true
		}
	}
	return false
}

func isDirCheck(checks []Check, p string) bool {
	q := regexp.QuoteMeta(p)
	re := regexp.MustCompile(`isdir\(|listdir\(|-d\s+["']?` + q)
	for _, c := range checks {
		if contains(c.Paths, p) && re.MatchString(c.Text) {
			return true
		}
	}
	return false
}
