package task

import (
	"strings"
	"testing"
)

func TestComposeOverlays(t *testing.T) {
	cases := []struct {
		name, compose string
		refused       []string // substrings of the error; none: loads
		warned        string   // substring of a warning
	}{
		{name: "a database the tests query", compose: "services:\n  main:\n    depends_on: [db]\n  db:\n    image: postgres:16\n",
			refused: []string{"services.db", "not supported", "services.main.depends_on"}},
		{name: "main's environment", compose: "services:\n  main:\n    environment:\n      API_KEY: x\n    volumes: [\"./data:/data\"]\n",
			refused: []string{"services.main.environment, services.main.volumes"}},
		{name: "a build with arguments", compose: "services:\n  main:\n    build:\n      context: .\n      args:\n        V: \"2\"\n",
			refused: []string{"services.main.build"}},
		{name: "not YAML", compose: "services: [\n", refused: []string{ComposeFile, "is not a compose file"}},
		{name: "limits and the default build", compose: "services:\n  main:\n    build:\n      context: .\n    deploy:\n      resources:\n        limits:\n          memory: 2g\n",
			warned: "services.main deploy not applied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk, err := Load(writeTask(t, map[string]string{ComposeFile: c.compose}))
			if len(c.refused) > 0 {
				if err == nil {
					t.Fatalf("loaded a task whose compose overlay t1flow cannot run")
				}
				for _, s := range c.refused {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w := strings.Join(tk.Warnings, "\n"); !strings.Contains(w, c.warned) {
				t.Errorf("warnings %q do not say %q", w, c.warned)
			}
		})
	}
}

func TestNoComposeOverlayNoWarning(t *testing.T) {
	tk, err := Load(writeTask(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range tk.Warnings {
		if strings.Contains(w, "compose") {
			t.Errorf("warning without a compose file: %s", w)
		}
	}
}
