package task

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHarborDefaults: with nothing set, the timeouts are Harbor's (verifier
// 600 s, no agent timeout, bounded by MaxTimeoutSec).
func TestHarborDefaults(t *testing.T) {
	cfg, _, errs := ParseConfig("task.toml", []byte(`version = "1.0"`))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if cfg.VerifierTimeoutSec != 600 || cfg.AgentTimeoutSec != 0 || cfg.AgentDeadlineSec() != MaxTimeoutSec {
		t.Fatalf("verifier %v agent %v (deadline %v), want Harbor's 600 and none", cfg.VerifierTimeoutSec, cfg.AgentTimeoutSec, cfg.AgentDeadlineSec())
	}
	cfg, _, _ = ParseConfig("task.toml", []byte("[agent]\ntimeout_sec = 900\n"))
	if cfg.AgentDeadlineSec() != 900 {
		t.Fatalf("agent deadline %v, want the task's 900", cfg.AgentDeadlineSec())
	}
}

// TestHarborLegacySizes: Harbor 1.0's memory = "4G" / storage = "10G" are
// read (binary units), and a conflict with memory_mb is an error.
func TestHarborLegacySizes(t *testing.T) {
	cfg, warns, errs := ParseConfig("task.toml", []byte("[environment]\nmemory = \"4G\"\nstorage = \"512M\"\n"))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if cfg.MemoryMB != 4096 || cfg.StorageMB != 512 {
		t.Fatalf("memory %d MB storage %d MB, want 4096 and 512", cfg.MemoryMB, cfg.StorageMB)
	}
	if strings.Contains(strings.Join(warns, "\n"), "unknown key") {
		t.Fatalf("legacy keys called unknown: %v", warns)
	}
	_, _, errs = ParseConfig("task.toml", []byte("[environment]\nmemory = \"4G\"\nmemory_mb = 2048\nstorage = \"ten\"\n"))
	all := errs.Error()
	for _, w := range []string{`environment.memory = "4G" (4096 MB) disagrees with environment.memory_mb = 2048`, `environment.storage = "ten"`} {
		if !strings.Contains(all, w) {
			t.Errorf("no error %q in:\n%s", w, all)
		}
	}
}

// TestHarborWorkdirOSUsers: environment.workdir, os and the agent's and
// verifier's user are read and honoured (no warning); bad values name the
// key.
func TestHarborWorkdirOSUsers(t *testing.T) {
	cfg, warns, errs := ParseConfig("task.toml", []byte("[environment]\nworkdir = \"/srv/app\"\nos = \"Linux\"\n[agent]\nuser = \"agent\"\n[verifier]\nuser = 1000\n"))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if cfg.Workdir != "/srv/app" || cfg.AgentUser != "agent" || cfg.VerifierUser != "1000" {
		t.Fatalf("workdir %q agent user %q verifier user %q", cfg.Workdir, cfg.AgentUser, cfg.VerifierUser)
	}
	if all := strings.Join(warns, "\n"); strings.Contains(all, "unknown key") || strings.Contains(all, "user") {
		t.Fatalf("warnings:\n%s", all)
	}
	_, _, errs = ParseConfig("task.toml", []byte("[environment]\nworkdir = \"app\"\nos = \"windows\"\n[agent]\nuser = [1]\n"))
	all := errs.Error()
	for _, w := range []string{`environment.workdir = "app" must be an absolute path`, `environment.os = "windows": t1flow runs Linux sandboxes only`, "agent.user = [1] must be a username or a UID"} {
		if !strings.Contains(all, w) {
			t.Errorf("no error %q in:\n%s", w, all)
		}
	}
}

// TestHarborEnvFromTheWorker: ${VAR} and ${VAR:-default} are kept at
// import and filled in from the worker's environment; an unset bare ${VAR}
// is an error naming the variable and the key.
func TestHarborEnvFromTheWorker(t *testing.T) {
	cfg, warns, errs := ParseConfig("task.toml", []byte("[verifier.env]\nOPENAI_API_KEY = \"${OPENAI_API_KEY}\"\nMODEL = \"${JUDGE_MODEL:-gpt-4o}\"\n[environment.env]\nHOME_DIR = \"/home/${USER_NAME:-u}\"\n"))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(strings.Join(warns, "\n"), "verifier.env.OPENAI_API_KEY reads ${OPENAI_API_KEY} from the worker's environment") {
		t.Errorf("import does not name the host variable: %v", warns)
	}
	env := map[string]string{"OPENAI_API_KEY": "sk-1", "USER_NAME": "ann"}
	got, err := cfg.ResolveEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if got.VerifierEnv["OPENAI_API_KEY"] != "sk-1" || got.VerifierEnv["MODEL"] != "gpt-4o" || got.Env["HOME_DIR"] != "/home/ann" {
		t.Fatalf("resolved %v %v", got.VerifierEnv, got.Env)
	}
	if cfg.VerifierEnv["OPENAI_API_KEY"] != "${OPENAI_API_KEY}" {
		t.Fatal("ResolveEnv changed the config it was called on")
	}
	_, err = cfg.ResolveEnv(func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), `verifier.env.OPENAI_API_KEY = "${OPENAI_API_KEY}" needs OPENAI_API_KEY`) || strings.Contains(err.Error(), "JUDGE_MODEL") {
		t.Fatalf("unset variable: %v", err)
	}
}

// TestDockerfileOptionalWithDockerImage: Harbor needs no
// environment/Dockerfile when task.toml names docker_image; without either
// the Dockerfile is still required.
func TestDockerfileOptionalWithDockerImage(t *testing.T) {
	dir := writeTask(t, map[string]string{DockerfileFile: "<none>", ConfigFile: "[environment]\ndocker_image = \"python:3.12-slim\"\n"})
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(tk.Warnings, "\n"), "FROM python:3.12-slim is built on t1flow's python-trixie base: Python 3.13") {
		t.Errorf("no approximation warning: %v", tk.Warnings)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte("version = \"1.0\"\n"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "environment/Dockerfile: missing") {
		t.Fatalf("no Dockerfile and no docker_image: %v", err)
	}
}
