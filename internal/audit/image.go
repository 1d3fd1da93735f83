package audit

import (
	"path"
	"strings"
)

// imageFiles are the environment/ files that reach the built image: the
// Dockerfile itself (its RUN lines run in it) and what its COPY and ADD
// lines take from the build context. A file of the context that no line
// copies never reaches the agent, so it cannot leak anything.
func imageFiles(env map[string]string, dockerfile string) map[string]string {
	out := map[string]string{}
	if df, ok := env["environment/Dockerfile"]; ok {
		out["environment/Dockerfile"] = df
	}
	for _, src := range copySources(dockerfile) {
		for name, body := range env {
			rel := strings.TrimPrefix(name, "environment/")
			if rel != "Dockerfile" && copies(src, rel) {
				out[name] = body
			}
		}
	}
	return out
}

// copySources lists the build-context sources of the Dockerfile's COPY and
// ADD lines (not those copied from another stage or image).
func copySources(dockerfile string) []string {
	var out []string
	for _, l := range joinContinuations(dockerfile) {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.EqualFold(f[0], "COPY") && !strings.EqualFold(f[0], "ADD") {
			continue
		}
		args, fromStage := []string{}, false
		for _, a := range f[1:] {
			if strings.HasPrefix(a, "--") {
				fromStage = fromStage || strings.HasPrefix(a, "--from=")
				continue
			}
			args = append(args, a)
		}
		if fromStage || len(args) < 2 {
			continue
		}
		if strings.HasPrefix(args[0], "[") { // JSON form
			joined := strings.Trim(strings.Join(args, " "), "[]")
			args = nil
			for _, a := range strings.Split(joined, ",") {
				args = append(args, strings.Trim(strings.TrimSpace(a), `"`))
			}
		}
		out = append(out, args[:len(args)-1]...)
	}
	return out
}

// copies reports whether a COPY source (a path, a directory or a glob,
// relative to the context) takes the context file rel.
func copies(src, rel string) bool {
	src = strings.TrimPrefix(path.Clean("/"+src), "/")
	if src == "" || src == "." {
		return true
	}
	if ok, _ := path.Match(src, rel); ok || rel == src || strings.HasPrefix(rel, src+"/") {
		return true
	}
	// A glob matching a directory above rel.
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		if ok, _ := path.Match(src, d); ok {
			return true
		}
	}
	return false
}

func joinContinuations(dockerfile string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(dockerfile, "\n") {
		if t := strings.TrimRight(l, " \t"); strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		out = append(out, cur+l)
		cur = ""
	}
	return append(out, cur)
}

// isTestCode reports whether a file under tests/ is test code (it asserts
// or defines tests), not an input the tests share with the image, such as
// a data generator both run.
func isTestCode(src string) bool {
	for _, l := range strings.Split(src, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "assert") || strings.HasPrefix(t, "def test_") || strings.HasPrefix(t, "self.assert") || strings.Contains(t, "pytest.raises") {
			return true
		}
	}
	return false
}
