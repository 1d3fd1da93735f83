package task

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Limits on what a task.toml may ask for. Values outside are errors, not clamps:
// a task that asks for a 30-day timeout is broken and should be fixed at the source.
const (
	MaxTimeoutSec = 6 * 3600
	MaxCPUs       = 64
	MaxMemoryMB   = 256 * 1024
	MaxPids       = 65536
	MinStorageMB  = 16
	MaxStorageMB  = 1 << 20 // 1 TiB
)

// Defaults applied when task.toml leaves a field out.
const (
	// DefaultAgentTimeoutSec 0 is Harbor's "no agent timeout": the agent
	// phase is bounded by the turn cap and MaxTimeoutSec (AgentDeadlineSec).
	DefaultAgentTimeoutSec    = 0
	DefaultVerifierTimeoutSec = 600 // Harbor's
	DefaultBuildTimeoutSec    = 600
	DefaultCPUs               = 1
	DefaultMemoryMB           = 2048
	DefaultPids               = 512
	DefaultStorageMB          = 10240 // Harbor's default
)

// Config is the part of task.toml that t1flow uses.
type Config struct {
	Version    string
	Name       string
	Category   string
	Difficulty string
	Tags       []string

	// AgentTimeoutSec 0: none given (Harbor runs the agent without one).
	AgentTimeoutSec    float64
	VerifierTimeoutSec float64
	BuildTimeoutSec    float64
	CPUs               float64
	MemoryMB           int64
	Pids               int64
	AllowInternet      bool
	StorageMB          int64
	// VerifierEnv is passed to tests/test.sh.
	VerifierEnv map[string]string
	// Env ([environment.env]) is set in the sandbox for the agent, the
	// oracle and the verifier; SolutionEnv (solution.env) only for the
	// oracle's solve.sh.
	Env         map[string]string
	SolutionEnv map[string]string
	// DockerImage is used as the sandbox image when it is present on the
	// host; otherwise environment/Dockerfile is built, or, with no
	// Dockerfile, the image through the base map.
	DockerImage string
	// Workdir (environment.workdir) replaces the image's WORKDIR for every
	// phase; AgentUser (agent.user) runs the agent's terminal and the
	// oracle's and scripted agents' commands; VerifierUser (verifier.user)
	// runs tests/test.sh (sandbox.VerifierUser: else the image's USER).
	Workdir      string
	AgentUser    string
	VerifierUser string
	// VerifierPython is the Python version tests/test.sh asks uv for
	// (RequestedPython; read by Load from test.sh, not from task.toml). The
	// sealed verifier mounts the toolchain whose Python serves it
	// (VerifierBase); "" keeps the one that follows the image's base.
	VerifierPython string
	// Artifacts are paths copied out of the sandbox after verification into
	// the rollout record (plus /logs/artifacts, Harbor's convention directory).
	Artifacts []Artifact
}

// Artifact is one artifacts entry: a path in the sandbox, and where it goes
// under the rollout's artifacts (its base name unless given).
type Artifact struct {
	Source      string `json:"source"`
	Destination string `json:"destination,omitempty"`
}

// ParseConfig reads task.toml. Every Harbor key is classified
// (harborKeyRules): a key that changes what is verified or how the reward is
// computed is an error when set; one t1flow cannot honour but can do without
// is a warning saying what happens instead. Unknown keys are warnings: real
// tasks carry extra metadata, and rejecting them would refuse good tasks.
func ParseConfig(file string, b []byte) (Config, []string, Errors) {
	cfg := Config{
		AgentTimeoutSec:    DefaultAgentTimeoutSec,
		VerifierTimeoutSec: DefaultVerifierTimeoutSec,
		BuildTimeoutSec:    DefaultBuildTimeoutSec,
		CPUs:               DefaultCPUs,
		MemoryMB:           DefaultMemoryMB,
		Pids:               DefaultPids,
		StorageMB:          DefaultStorageMB,
	}
	var raw map[string]any
	if _, err := toml.Decode(string(b), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return cfg, nil, Errors{{File: file, Msg: fmt.Sprintf("invalid TOML at line %d: %s", pe.Position.Line, pe.Message)}}
		}
		return cfg, nil, Errors{{File: file, Msg: "invalid TOML: " + err.Error()}}
	}
	tablesAsLists(raw)
	p := &parser{file: file, raw: raw}
	cfg.Version = p.str("version", "")
	if cfg.Version == "" {
		cfg.Version = p.str("schema_version", "")
	}
	cfg.Name = p.str("task.name", "")
	cfg.Category = p.str("metadata.category", "")
	cfg.Difficulty = p.str("metadata.difficulty", "")
	cfg.Tags = p.strs("metadata.tags")
	cfg.AgentTimeoutSec = p.num("agent.timeout_sec", cfg.AgentTimeoutSec, 1, MaxTimeoutSec)
	cfg.VerifierTimeoutSec = p.num("verifier.timeout_sec", cfg.VerifierTimeoutSec, 1, MaxTimeoutSec)
	cfg.BuildTimeoutSec = p.num("environment.build_timeout_sec", cfg.BuildTimeoutSec, 1, MaxTimeoutSec)
	cfg.CPUs = p.num("environment.cpus", cfg.CPUs, 0.1, MaxCPUs)
	cfg.MemoryMB = p.size("environment.memory", "environment.memory_mb", cfg.MemoryMB, 64, MaxMemoryMB)
	cfg.Pids = int64(p.num("environment.pids_limit", float64(cfg.Pids), 16, MaxPids))
	cfg.StorageMB = p.size("environment.storage", "environment.storage_mb", cfg.StorageMB, MinStorageMB, MaxStorageMB)
	cfg.Workdir = p.absPath("environment.workdir")
	cfg.AgentUser = p.user("agent.user")
	cfg.VerifierUser = p.user("verifier.user")
	p.linux("environment.os")
	cfg.AllowInternet = p.boolean("environment.allow_internet", false)
	cfg.VerifierEnv = p.envMap("verifier.env")
	cfg.Env = p.envMap("environment.env")
	cfg.SolutionEnv = p.envMap("solution.env")
	cfg.DockerImage = p.str("environment.docker_image", "")
	cfg.Artifacts = p.artifacts("artifacts")
	p.refused()
	p.unsupported()
	p.warnUnknown()
	return cfg, p.warnings, p.errs
}

type parser struct {
	file     string
	raw      map[string]any
	errs     Errors
	warnings []string
}

func (p *parser) lookup(key string) (any, bool) {
	var cur any = p.raw
	for _, part := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = m[part]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}

func (p *parser) fail(key, msg string) {
	p.errs = append(p.errs, &FieldError{File: p.file, Field: key, Msg: msg})
}

// typed is the value at key if it is there and a T; a value of another type
// is an error naming what it must be.
func typed[T any](p *parser, key, mustBe string) (T, bool) {
	var zero T
	v, ok := p.lookup(key)
	if !ok {
		return zero, false
	}
	x, ok := v.(T)
	if !ok {
		p.fail(key, fmt.Sprintf("= %v must be %s", v, mustBe))
		return zero, false
	}
	return x, true
}

func (p *parser) str(key, def string) string {
	if s, ok := typed[string](p, key, "a string"); ok {
		return s
	}
	return def
}

func (p *parser) strs(key string) []string {
	list, ok := typed[[]any](p, key, "a list of strings")
	if !ok {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			p.fail(key, fmt.Sprintf("contains %v, expected only strings", x))
			return nil
		}
		out = append(out, s)
	}
	return out
}

func (p *parser) strMap(key string) map[string]string {
	m, ok := typed[map[string]any](p, key, "a table of strings")
	if !ok {
		return nil
	}
	out := map[string]string{}
	for k, x := range m {
		s, ok := x.(string)
		if !ok {
			p.fail(key+"."+k, fmt.Sprintf("= %v must be a string", x))
			continue
		}
		out[k] = s
	}
	return out
}

func (p *parser) num(key string, def, lo, hi float64) float64 {
	v, ok := p.lookup(key)
	if !ok {
		return def
	}
	var f float64
	switch x := v.(type) {
	case int64:
		f = float64(x)
	case float64:
		f = x
	default:
		p.fail(key, fmt.Sprintf("= %q must be a number", fmt.Sprint(v)))
		return def
	}
	if f < lo || f > hi {
		p.fail(key, fmt.Sprintf("= %s must be between %s and %s", fmtNum(f), fmtNum(lo), fmtNum(hi)))
		return def
	}
	return f
}

func (p *parser) boolean(key string, def bool) bool {
	if b, ok := typed[bool](p, key, "true or false"); ok {
		return b
	}
	return def
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
