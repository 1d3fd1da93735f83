package task

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ComposeFile is Harbor's per-task compose overlay: its Docker environment
// runs `docker compose` with its own base (a service "main" built from
// environment/Dockerfile) and then this file, which may add services (a
// database the tests query) or override main's settings.
const ComposeFile = "environment/docker-compose.yaml"

// composeMainHarmless are keys of the main service t1flow does not apply and
// that leave what the tests see unchanged: how the keepalive is started,
// restarts, resource limits (the task's own environment.cpus and memory
// apply), networking (environment.allow_internet applies).
var composeMainHarmless = map[string]bool{
	"image": true, "pull_policy": true, "command": true, "container_name": true, "restart": true,
	"stdin_open": true, "tty": true, "init": true, "healthcheck": true, "deploy": true,
	"mem_limit": true, "memswap_limit": true, "cpus": true, "cpu_count": true, "shm_size": true,
	"pids_limit": true, "networks": true, "network_mode": true, "labels": true, "logging": true,
}

// checkCompose reads dir's ComposeFile, if any. t1flow runs a task as its
// image alone: no compose services start and no override of main is applied.
// A task whose tests would see a difference (another service, main's
// environment, volumes, user, working directory, entrypoint or build) is
// refused naming the keys, rather than run as another task and scored
// against Harbor's; keys that change nothing the tests see are warnings.
func checkCompose(dir string) (warns []string, errs Errors) {
	p := filepath.Join(dir, ComposeFile)
	b, err := os.ReadFile(p)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, Errors{{File: p, Msg: "cannot read: " + errText(err)}}
	}
	var doc struct {
		Services map[string]map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, Errors{{File: p, Msg: "is not a compose file: " + err.Error()}}
	}
	var others []string
	for name := range doc.Services {
		if name != "main" {
			others = append(others, name)
		}
	}
	if len(others) > 0 {
		sort.Strings(others)
		errs = append(errs, &FieldError{File: p, Field: "services." + strings.Join(others, ", services."),
			Msg: "not supported: t1flow runs the task's image alone and starts no compose services, so tests that reach them would fail where Harbor's pass"})
	}
	main := doc.Services["main"]
	var refused, ignored []string
	for k, v := range main {
		switch {
		case composeMainHarmless[k]:
			ignored = append(ignored, k)
		case k == "build" && defaultBuild(v):
		default:
			refused = append(refused, k)
		}
	}
	sort.Strings(refused)
	sort.Strings(ignored)
	if len(refused) > 0 {
		errs = append(errs, &FieldError{File: p, Field: "services.main." + strings.Join(refused, ", services.main."),
			Msg: "not supported: t1flow does not apply compose overrides of the main service, and these change what the tests see"})
	}
	if len(ignored) > 0 {
		warns = append(warns, fmt.Sprintf("%s: services.main %s not applied (t1flow builds environment/Dockerfile and ignores compose overrides; task.toml's environment settings apply)", p, strings.Join(ignored, ", ")))
	}
	return warns, errs
}

// defaultBuild is a build section that says what Harbor's base already does:
// environment/ as the context and its Dockerfile, no arguments or target.
func defaultBuild(v any) bool {
	switch b := v.(type) {
	case string:
		return b == "." || b == "./"
	case map[string]any:
		for k, x := range b {
			s, _ := x.(string)
			switch {
			case k == "context" && (s == "." || s == "./" || s == "${CONTEXT_DIR}"):
			case k == "dockerfile" && (s == "Dockerfile" || s == "./Dockerfile"):
			default:
				return false
			}
		}
		return true
	}
	return false
}
