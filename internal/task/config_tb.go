package task

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// envTemplate is Harbor's ${VAR} / ${VAR:-default}.
var envTemplate = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// envMap reads a table of environment variables. Harbor resolves ${VAR}
// from the host; t1flow does not pass the worker's environment into sandboxes
// (a task must behave the same on every host, and host secrets stay out), so
// ${VAR:-default} becomes its default and a bare ${VAR} is an error.
func (p *parser) envMap(key string) map[string]string {
	m := p.strMap(key)
	for _, k := range sortedKeys(m) {
		v := m[k]
		if !validEnvName(k) {
			p.fail(key+"."+k, "is not a valid environment variable name")
			continue
		}
		bad := ""
		m[k] = envTemplate.ReplaceAllStringFunc(v, func(t string) string {
			sub := envTemplate.FindStringSubmatch(t)
			if sub[2] == "" {
				bad = sub[1]
				return t
			}
			return sub[3]
		})
		if bad != "" {
			p.fail(key+"."+k, fmt.Sprintf("= %q reads host variable %s: t1flow never passes the worker's environment into a sandbox; write the value, or ${%s:-default}", v, bad, bad))
		} else if m[k] != v {
			p.warnings = append(p.warnings, fmt.Sprintf("%s: %s.%s = %q: host variables are not read, using %q", p.file, key, k, v, m[k]))
		}
	}
	return m
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

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
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

// unsupported warns, naming the key, about every Harbor key t1flow reads but
// cannot honour, and what happens instead.
func (p *parser) unsupported() {
	keys := make([]string, 0, len(unsupportedKeys))
	for k := range unsupportedKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := p.lookup(k)
		if !ok || isZero(v) {
			continue
		}
		p.warnings = append(p.warnings, fmt.Sprintf("%s: %s is not supported (%s)", p.file, k, unsupportedKeys[k]))
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
