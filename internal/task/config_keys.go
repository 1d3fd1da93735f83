package task

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// KeyClass is what t1flow does with a task.toml key.
type KeyClass int

const (
	Unclassified KeyClass = iota
	// Honoured: t1flow does what Harbor does with it (docs/task-format.md).
	Honoured
	// Ignored: accepted and unused; it changes nothing in a single-step
	// run, in Harbor either (package metadata).
	Ignored
	// Warned: not supported; a warning names the key and what happens
	// instead. None changes what the verifier checks or how the reward is
	// computed.
	Warned
	// Refused: set to anything but Harbor's default, the task is rejected
	// at load, naming the key and why: t1flow would verify or score
	// something other than what the task defines.
	Refused
)

func (c KeyClass) String() string {
	return [...]string{"unclassified", "honoured", "ignored", "warned", "refused"}[c]
}

type keyRule struct {
	class KeyClass
	// why: for Warned, what happens instead; for Refused, why the task
	// cannot run.
	why string
	// subtree: the rule covers every key under this one (a free-form
	// table, or a section warned about or refused as a whole).
	subtree bool
	// accept: a Refused key's value that is Harbor's default and fine.
	accept string
}

var (
	honoured     = keyRule{class: Honoured}
	honouredTree = keyRule{class: Honoured, subtree: true}
	ignored      = keyRule{class: Ignored}
	noNetwork    = "the sandbox's network is environment.allow_internet's for every phase (true: a bridge network, else none)"
	noGPU        = "sandboxes get no GPU"
)

func warned(why string) keyRule     { return keyRule{class: Warned, why: why} }
func warnedTree(why string) keyRule { return keyRule{class: Warned, why: why, subtree: true} }

// harborKeyRules classifies every key of Harbor's task.toml (TaskConfig,
// schema 1.4, Harbor 0.26: testdata/harbor-0.26-task-keys.json, checked by
// TestEveryHarborKeyIsClassified) and the legacy keys t1flow also reads.
// Lists of tables are named like tables ("artifacts.source").
var harborKeyRules = map[string]keyRule{
	"schema_version": honoured, "version": honoured, // version: Harbor's older name
	"source":                     ignored,
	"task":                       honoured,
	"task.name":                  honoured,
	"task.version":               ignored,
	"task.description":           ignored,
	"task.keywords":              ignored,
	"task.authors":               {class: Ignored, subtree: true},
	"metadata":                   honouredTree, // free-form; category, difficulty, tags read
	"multi_step_reward_strategy": {class: Ignored, why: "only multi-step tasks use it, and steps are refused"},

	"agent":               honoured,
	"agent.timeout_sec":   honoured,
	"agent.user":          honoured,
	"agent.network_mode":  warned(noNetwork),
	"agent.allowed_hosts": warned(noNetwork),

	"verifier":               honoured,
	"verifier.timeout_sec":   honoured,
	"verifier.env":           honouredTree,
	"verifier.user":          honoured,
	"verifier.network_mode":  warned("the sealed verifier runs with the environment's network"),
	"verifier.allowed_hosts": warned("the sealed verifier runs with the environment's network"),
	"verifier.environment_mode": {class: Refused, accept: "shared",
		why: "a verifier in a separate environment is not supported: Harbor runs tests/ in a fresh container that gets only the declared artifacts; t1flow would run them in the agent's sandbox, on everything the agent left"},
	"verifier.environment": {class: Refused, subtree: true,
		why: "is set, which makes Harbor run the verifier in a separate environment (its own image, given only the declared artifacts): not supported; t1flow would run the tests in the agent's sandbox"},
	"verifier.collect": {class: Refused, subtree: true,
		why: "is set: collect hooks are not supported: Harbor runs them in the sandbox after the agent phase and before the tests, to snapshot state that the tests or a separate verifier read; t1flow would verify without them"},

	"environment":                   honoured,
	"environment.build_timeout_sec": honoured,
	"environment.cpus":              honoured,
	"environment.memory_mb":         honoured,
	"environment.memory":            honoured, // Harbor's legacy "4G"
	"environment.storage_mb":        honoured,
	"environment.storage":           honoured, // Harbor's legacy "10G"
	"environment.pids_limit":        honoured, // t1flow's own
	"environment.allow_internet":    honoured,
	"environment.docker_image":      honoured,
	"environment.workdir":           honoured,
	"environment.os":                honoured, // linux only; windows is an error
	"environment.env":               honouredTree,
	"environment.gpus":              warned(noGPU),
	"environment.gpu_types":         warned(noGPU),
	"environment.tpu":               warnedTree("sandboxes get no TPU"),
	"environment.mcp_servers":       warnedTree("MCP servers are not started: the agent gets none (tests do not see them either)"),
	"environment.healthcheck":       warnedTree("no healthcheck runs before the agent starts"),
	"environment.skills_dir":        warned("skills are not copied for the agent"),
	"environment.network_mode":      warned("only allow_internet is honoured (true: a bridge network, else none)"),
	"environment.allowed_hosts":     warned("no allowlist: the sandbox has no network unless allow_internet = true"),

	"solution":     honoured,
	"solution.env": honouredTree,

	"artifacts":             honoured,
	"artifacts.source":      honoured,
	"artifacts.destination": honoured,
	"artifacts.exclude":     warned("the whole path is copied, excluded files too"),
	"artifacts.service":     warned("t1flow has no compose services: the path is copied from the sandbox, and recorded as missing where it is not there"),

	"steps": {class: Refused, subtree: true,
		why: "is set: multi-step tasks are not supported: Harbor runs each step's steps/<name>/instruction.md and tests in turn and scores their rewards together (multi_step_reward_strategy, min_reward); t1flow would run only the top-level instruction.md and tests/"},
}

// ClassifyKey says what t1flow does with a dotted task.toml key, and why
// where it is warned about or refused. A key under a free-form, warned or
// refused table takes that table's class; any other key it does not list
// is Unclassified (an unknown key, warned about as ignored).
func ClassifyKey(key string) (KeyClass, string) {
	if r, ok := harborKeyRules[key]; ok {
		return r.class, r.why
	}
	for k := key; strings.Contains(k, "."); {
		k = k[:strings.LastIndex(k, ".")]
		if r, ok := harborKeyRules[k]; ok && r.subtree {
			return r.class, r.why
		}
	}
	return Unclassified, ""
}

// unsupported warns, naming the key, about every Harbor key t1flow reads but
// cannot honour, and what happens instead.
func (p *parser) unsupported() {
	for _, k := range slices.Sorted(maps.Keys(harborKeyRules)) {
		r := harborKeyRules[k]
		if r.class != Warned || strings.HasPrefix(k, "artifacts.") {
			continue // artifacts' entries: p.artifacts
		}
		if v, ok := p.lookup(k); ok && !isZero(v) {
			p.warnings = append(p.warnings, fmt.Sprintf("%s: %s is not supported (%s)", p.file, k, r.why))
		}
	}
}

// refused rejects the task for every Refused key set to anything but
// Harbor's default.
func (p *parser) refused() {
	for _, k := range slices.Sorted(maps.Keys(harborKeyRules)) {
		r := harborKeyRules[k]
		v, ok := p.lookup(k)
		if r.class != Refused || !ok || isZero(v) && r.accept == "" {
			continue
		}
		if r.accept == "" {
			p.fail(k, r.why)
			continue
		}
		switch s, _ := v.(string); s {
		case r.accept:
		case "separate":
			p.fail(k, fmt.Sprintf("= %q: %s", s, r.why))
		default:
			p.fail(k, fmt.Sprintf("= %v must be %q or \"separate\"", v, r.accept))
		}
	}
}

// warnUnknown lists keys outside harborKeyRules, down to the tables whose
// keys are free-form or are warned about or refused as a whole.
func (p *parser) warnUnknown() {
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			full := prefix + k
			r, ok := harborKeyRules[full]
			switch sub, table := m[k].(map[string]any); {
			case !ok:
				p.warnings = append(p.warnings, fmt.Sprintf("%s: unknown key %s (ignored)", p.file, full))
			case table && !r.subtree:
				walk(full+".", sub)
			}
		}
	}
	walk("", p.raw)
}

// tablesAsLists makes TOML's [[x]] tables ([]map[string]any when decoded)
// the []any that an inline list of tables decodes to, so both read alike.
func tablesAsLists(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = tablesAsLists(e)
		}
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tablesAsLists(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = tablesAsLists(e)
		}
	}
	return v
}
