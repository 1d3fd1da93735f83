package task

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// envTemplate is Harbor's ${VAR} / ${VAR:-default}.
var envTemplate = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// envMap reads a table of environment variables. As in Harbor, ${VAR} and
// ${VAR:-default} are read from the environment of the worker that runs the
// sandbox (ResolveEnv), so an LLM-judge verifier's API key stays on the
// worker; the import names each such variable.
func (p *parser) envMap(key string) map[string]string {
	m := p.strMap(key)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !validEnvName(k) {
			p.fail(key+"."+k, "is not a valid environment variable name")
			continue
		}
		for _, sub := range envTemplate.FindAllStringSubmatch(m[k], -1) {
			p.warnings = append(p.warnings, fmt.Sprintf("%s: %s.%s reads %s from the worker's environment when the sandbox runs", p.file, key, k, sub[0]))
		}
	}
	return m
}

// ResolveEnv fills in ${VAR} and ${VAR:-default} in environment.env,
// verifier.env and solution.env from lookup (the worker's environment). A
// bare ${VAR} that lookup lacks is an error naming the variable.
func (c Config) ResolveEnv(lookup func(string) (string, bool)) (Config, error) {
	var missing []string
	resolve := func(section string, m map[string]string) map[string]string {
		if len(m) == 0 {
			return m
		}
		out := make(map[string]string, len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out[k] = envTemplate.ReplaceAllStringFunc(m[k], func(t string) string {
				sub := envTemplate.FindStringSubmatch(t)
				if v, ok := lookup(sub[1]); ok {
					return v
				}
				if sub[2] != "" {
					return sub[3]
				}
				missing = append(missing, fmt.Sprintf("%s.%s = %q needs %s", section, k, m[k], sub[1]))
				return t
			})
		}
		return out
	}
	c.Env = resolve("environment.env", c.Env)
	c.VerifierEnv = resolve("verifier.env", c.VerifierEnv)
	c.SolutionEnv = resolve("solution.env", c.SolutionEnv)
	if len(missing) > 0 {
		return c, fmt.Errorf("task.toml: %s, which the worker's environment does not set: set it where the worker runs, or write ${VAR:-default}", strings.Join(missing, "; "))
	}
	return c, nil
}

func validEnvName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// artifacts reads Harbor's artifacts list: each entry a path, or a table
// {source, destination}. Sources must be absolute; destinations relative.
func (p *parser) artifacts(key string) []Artifact {
	list, ok := typed[[]any](p, key, "a list of paths or {source, destination} tables")
	if !ok {
		return nil
	}
	var out []Artifact
	for i, x := range list {
		field := fmt.Sprintf("%s[%d]", key, i)
		var a Artifact
		switch v := x.(type) {
		case string:
			a.Source = v
		case map[string]any:
			a.Source, _ = v["source"].(string)
			a.Destination, _ = v["destination"].(string)
			p.artifactKeys(key, field, v)
		default:
			p.fail(field, fmt.Sprintf("= %v must be a path or a {source, destination} table", x))
			continue
		}
		if !strings.HasPrefix(a.Source, "/") {
			p.fail(field, fmt.Sprintf("source %q must be an absolute path in the sandbox", a.Source))
			continue
		}
		if a.Destination == "" {
			a.Destination = path.Base(path.Clean(a.Source))
		}
		if d := path.Clean(a.Destination); path.IsAbs(d) || d == ".." || strings.HasPrefix(d, "../") {
			p.fail(field, fmt.Sprintf("destination %q must be a relative path", a.Destination))
			continue
		}
		out = append(out, a)
	}
	return out
}

// artifactKeys warns about an artifacts entry's keys that t1flow does not
// honour (harborKeyRules' "artifacts.*") and those it does not know.
func (p *parser) artifactKeys(key, field string, entry map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(entry)) {
		r, ok := harborKeyRules[key+"."+k]
		switch {
		case !ok:
			p.warnings = append(p.warnings, fmt.Sprintf("%s: unknown key %s.%s (ignored)", p.file, field, k))
		case r.class != Warned || isZero(entry[k]) || k == "service" && entry[k] == "main":
		default:
			p.warnings = append(p.warnings, fmt.Sprintf("%s: %s.%s is not supported (%s)", p.file, field, k, r.why))
		}
	}
}

func isZero(v any) bool {
	switch x := v.(type) {
	case int64:
		return x == 0
	case []any:
		return len(x) == 0
	case string:
		return x == ""
	}
	return false
}
