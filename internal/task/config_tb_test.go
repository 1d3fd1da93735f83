package task

import (
	"strings"
	"testing"
)

func TestTerminalBench21Config(t *testing.T) {
	cfg, warns, errs := ParseConfig("task.toml", []byte(`schema_version = "1.1"
artifacts = ["/app/out.txt", { source = "/app/logs", destination = "run/logs" }]
[environment]
storage_mb = 2048
docker_image = "alexgshaw/word-frequency:20251031"
mcp_servers = [{ name = "x", transport = "sse", url = "http://x:8000/sse" }]
[environment.env]
A = "1"
B = "${B:-two}"
[solution.env]
S = "s"
[verifier]
user = "nobody"
`))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if cfg.StorageMB != 2048 || cfg.DockerImage != "alexgshaw/word-frequency:20251031" || cfg.Env["A"] != "1" || cfg.Env["B"] != "${B:-two}" || cfg.SolutionEnv["S"] != "s" {
		t.Errorf("config: %+v", cfg)
	}
	if len(cfg.Artifacts) != 2 || cfg.Artifacts[0] != (Artifact{"/app/out.txt", "out.txt"}) || cfg.Artifacts[1] != (Artifact{"/app/logs", "run/logs"}) {
		t.Errorf("artifacts: %+v", cfg.Artifacts)
	}
	all := strings.Join(warns, "\n")
	for _, w := range []string{"environment.mcp_servers is not supported", "environment.env.B reads ${B:-two}"} {
		if !strings.Contains(all, w) {
			t.Errorf("no warning %q in:\n%s", w, all)
		}
	}
	if strings.Contains(all, "unknown key") {
		t.Errorf("schema 1.1 keys reported unknown:\n%s", all)
	}
}

func TestTerminalBench21ConfigErrors(t *testing.T) {
	_, _, errs := ParseConfig("task.toml", []byte(`artifacts = ["relative/path", { source = "/x", destination = "/abs" }]
[environment]
storage_mb = 4
[environment.env]
"1BAD" = "x"
`))
	all := errs.Error()
	for _, w := range []string{"environment.storage_mb = 4 must be between 16 and 1048576", "artifacts[0]", "artifacts[1]", "environment.env.1BAD"} {
		if !strings.Contains(all, w) {
			t.Errorf("no error %q in:\n%s", w, all)
		}
	}
}
