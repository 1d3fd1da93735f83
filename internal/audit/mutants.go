package audit

import (
	"fmt"
	"regexp"
	"strings"
)

// SplitSteps splits a bash script into effectful top-level steps: compound
// commands and here-documents stay whole; set, cd, export, comments and the
// shebang are not steps.
func SplitSteps(script string) []string {
	var steps []string
	var cur []string
	depth := 0
	heredoc := ""
	flush := func() {
		if len(cur) > 0 {
			steps = append(steps, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	opens := regexp.MustCompile(`^(for|while|until|if|case)\b|\{\s*$|\(\s*$`)
	closes := regexp.MustCompile(`^(done|fi|esac|\}|\))\b`)
	hd := regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)
	for _, line := range strings.Split(script, "\n") {
		trim := strings.TrimSpace(line)
		if heredoc != "" {
			cur = append(cur, line)
			if trim == heredoc {
				heredoc = ""
				if depth == 0 && !strings.HasSuffix(trim, "\\") {
					flush()
				}
			}
			continue
		}
		if depth == 0 && len(cur) == 0 && (trim == "" || strings.HasPrefix(trim, "#") || trivial(trim)) {
			continue
		}
		cur = append(cur, line)
		if m := hd.FindStringSubmatch(line); m != nil {
			heredoc = m[1]
			continue
		}
		if opens.MatchString(trim) && !strings.Contains(trim, "; done") && !strings.HasSuffix(trim, "fi") {
			depth++
		}
		if closes.MatchString(trim) && depth > 0 {
			depth--
		}
		if depth == 0 && !strings.HasSuffix(trim, "\\") && !strings.HasSuffix(trim, "&&") && !strings.HasSuffix(trim, "|") {
			flush()
		}
	}
	flush()
	return steps
}

func trivial(line string) bool {
	for _, p := range []string{"set ", "cd ", "export ", "#!", "pushd ", "popd", "shopt "} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return line == "set -e" || line == "true" || line == ":"
}

// Mutants removes one effectful step at a time (first, middle and last
// first), keeping everything else, so a verifier that still passes has not
// checked that step.
func Mutants(script string, n int) []Mutant {
	steps := SplitSteps(script)
	if len(steps) == 0 || n <= 0 {
		return nil
	}
	order := []int{len(steps) - 1, 0, len(steps) / 2}
	for i := range steps {
		order = append(order, i)
	}
	used := map[int]bool{}
	var out []Mutant
	for _, i := range order {
		if used[i] || len(out) >= n {
			continue
		}
		used[i] = true
		idx := strings.Index(script, steps[i])
		if idx < 0 {
			continue
		}
		m := script[:idx] + "# (step removed by the audit)\n" + script[idx+len(steps[i]):]
		first, _, _ := strings.Cut(strings.TrimSpace(steps[i]), "\n")
		out = append(out, Mutant{Description: fmt.Sprintf("without step %d of %d: %s", i+1, len(steps), first), Script: m})
	}
	return out
}
