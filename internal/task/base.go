package task

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Local bases a FROM line can be mapped to (sandbox/ builds them offline from
// Debian's mirror with debootstrap). A python base is its suite's base with
// pip, venv and no EXTERNALLY-MANAGED marker, as the official python images.
const (
	BaseBookworm       = "bookworm"
	BaseTrixie         = "trixie"
	BasePythonBookworm = "python-bookworm"
	BasePythonTrixie   = "python-trixie"
)

// BaseSuite is the Debian suite a base is built from.
func BaseSuite(base string) string { return strings.TrimPrefix(base, "python-") }

// BasePython is the Python version a base's Debian suite ships.
func BasePython(base string) string {
	if BaseSuite(base) == BaseTrixie {
		return "3.13"
	}
	return "3.11"
}

// BaseMapping maps registry images matching Pattern ('*' matches anything) to
// a local base. Approx, when set, says what differs from the named image; the
// task's import warns with it.
type BaseMapping struct {
	Pattern string
	Base    string
	Approx  string
}

// DefaultBases is how FROM lines are read when no alias file says otherwise
// (docs/task-format.md lists them). The longest matching pattern wins.
var DefaultBases = []BaseMapping{
	{"debian:12*", BaseBookworm, ""},
	{"debian:bookworm*", BaseBookworm, ""},
	{"debian:13*", BaseTrixie, ""},
	{"debian:trixie*", BaseTrixie, ""},
	{"debian:stable*", BaseTrixie, ""},
	{"debian:latest", BaseTrixie, ""},
	{"debian", BaseTrixie, ""},
	{"debian:*", BaseBookworm, "an older or unknown Debian release runs on bookworm"},
	{"python:3.13*", BasePythonTrixie, ""},
	{"python:3.11*", BasePythonBookworm, ""},
	{"python:3.12*", BasePythonTrixie, "Python 3.13 (Debian trixie's) stands in for 3.12"},
	{"python:3.14*", BasePythonTrixie, "Python 3.13 (Debian trixie's) stands in for 3.14"},
	{"python:3.10*", BasePythonBookworm, "Python 3.11 (Debian bookworm's) stands in for 3.10"},
	{"python:3.9*", BasePythonBookworm, "Python 3.11 (Debian bookworm's) stands in for 3.9"},
	{"python:3.8*", BasePythonBookworm, "Python 3.11 (Debian bookworm's) stands in for 3.8"},
	{"python:3-*", BasePythonTrixie, "Python 3.13 (Debian trixie's) stands in for the newest 3.x"},
	{"python:3", BasePythonTrixie, "Python 3.13 (Debian trixie's) stands in for the newest 3.x"},
	{"python", BasePythonTrixie, "Python 3.13 (Debian trixie's) stands in for the newest Python"},
	{"python:*", BasePythonTrixie, "Python 3.13 (Debian trixie's) stands in for this tag's Python"},
	{"ubuntu:24.04*", BaseTrixie, "Debian trixie (Python 3.13) stands in for Ubuntu 24.04 (Python 3.12)"},
	{"ubuntu:noble*", BaseTrixie, "Debian trixie (Python 3.13) stands in for Ubuntu 24.04 (Python 3.12)"},
	{"ubuntu:*", BaseBookworm, "Debian bookworm stands in for Ubuntu (apt package names mostly agree)"},
	{"ubuntu", BaseTrixie, "Debian trixie stands in for the newest Ubuntu"},
	{"ubuntu:latest", BaseTrixie, "Debian trixie stands in for the newest Ubuntu"},
	{"buildpack-deps:*", BaseBookworm, "Debian bookworm with t1flow's base packages, no compilers, stands in for buildpack-deps"},
	{"bash:*", BaseBookworm, "Debian bookworm's bash stands in for the bash image (Alpine)"},
}

// MatchBase is the longest pattern in ms that img matches.
func MatchBase(ms []BaseMapping, img string) (BaseMapping, bool) {
	sorted := append([]BaseMapping(nil), ms...)
	sort.SliceStable(sorted, func(i, j int) bool { return len(sorted[i].Pattern) > len(sorted[j].Pattern) })
	for _, m := range sorted {
		if GlobMatch(m.Pattern, img) {
			return m, true
		}
	}
	return BaseMapping{}, false
}

// GlobMatch reports whether s matches pat, where '*' matches anything.
func GlobMatch(pat, s string) bool {
	if pat == s {
		return true
	}
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pat), `\*`, ".*") + "$"
	ok, _ := regexp.MatchString(re, s)
	return ok
}

var fromLine = regexp.MustCompile(`(?i)^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?`)

// FromImages lists the images a Dockerfile's FROM lines name, leaving out
// earlier stages.
func FromImages(dockerfile string) []string {
	stages := map[string]bool{}
	var out []string
	for _, l := range strings.Split(dockerfile, "\n") {
		m := fromLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if !stages[strings.ToLower(m[1])] {
			out = append(out, m[1])
		}
		if m[2] != "" {
			stages[strings.ToLower(m[2])] = true
		}
	}
	return out
}

// baseWarnings says, for each FROM line the default map reads approximately,
// what it runs on instead.
func baseWarnings(file, dockerfile string) []string {
	var out []string
	for _, img := range FromImages(dockerfile) {
		if m, ok := MatchBase(DefaultBases, img); ok && m.Approx != "" {
			out = append(out, fmt.Sprintf("%s: FROM %s is built on t1flow's %s base: %s (docs/task-format.md, \"Images, offline\")", file, img, m.Base, m.Approx))
		}
	}
	return out
}
