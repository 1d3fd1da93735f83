// Package task parses, validates and fingerprints tasks in the Harbor format:
// instruction.md, task.toml, environment/Dockerfile, solution/solve.sh and
// tests/test.sh plus test files.
package task

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Required files, relative to the task directory.
const (
	InstructionFile = "instruction.md"
	ConfigFile      = "task.toml"
	DockerfileFile  = "environment/Dockerfile"
	SolutionFile    = "solution/solve.sh"
	TestScriptFile  = "tests/test.sh"
)

// Limits on what a task.toml may ask for. Values outside are errors, not clamps:
// a task that asks for a 30-day timeout is broken and should be fixed at the source.
const (
	MaxTimeoutSec = 6 * 3600
	MaxCPUs       = 64
	MaxMemoryMB   = 256 * 1024
	MaxPids       = 65536
)

// Defaults applied when task.toml leaves a field out.
const (
	DefaultAgentTimeoutSec    = 600
	DefaultVerifierTimeoutSec = 120
	DefaultBuildTimeoutSec    = 600
	DefaultCPUs               = 1
	DefaultMemoryMB           = 2048
	DefaultPids               = 512
)

// Config is the part of task.toml that t1flow uses.
type Config struct {
	Version    string
	Name       string
	Category   string
	Difficulty string
	Tags       []string

	AgentTimeoutSec    float64
	VerifierTimeoutSec float64
	BuildTimeoutSec    float64
	CPUs               float64
	MemoryMB           int64
	Pids               int64
	AllowInternet      bool
	// VerifierEnv is passed to tests/test.sh.
	VerifierEnv map[string]string
}

// Task is a parsed task directory.
type Task struct {
	Dir         string
	ID          string // content hash of the directory
	Name        string // directory base name unless task.toml names it
	Instruction string
	Config      Config
	Warnings    []string
}

// FieldError names the file and field at fault.
type FieldError struct {
	File  string // path of the file, as the user gave it
	Field string // dotted TOML key, or "" when the file itself is at fault
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s: %s %s", e.File, e.Field, e.Msg)
}

// Errors gathers every problem found in one task, so a user fixes them in one pass.
type Errors []*FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Load parses and validates the task directory dir.
func Load(dir string) (*Task, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, &FieldError{File: dir, Msg: "cannot read task directory: " + errText(err)}
	}
	if !st.IsDir() {
		return nil, &FieldError{File: dir, Msg: "is not a directory"}
	}
	var errs Errors
	for _, f := range []string{InstructionFile, ConfigFile, DockerfileFile, SolutionFile, TestScriptFile} {
		p := filepath.Join(dir, f)
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			errs = append(errs, &FieldError{File: p, Msg: "missing (every Harbor task needs it)"})
		case fi.IsDir():
			errs = append(errs, &FieldError{File: p, Msg: "is a directory, expected a file"})
		case fi.Size() == 0 && f != SolutionFile:
			errs = append(errs, &FieldError{File: p, Msg: "is empty"})
		}
	}
	t := &Task{Dir: dir, Name: filepath.Base(filepath.Clean(dir))}
	if b, err := os.ReadFile(filepath.Join(dir, InstructionFile)); err == nil {
		t.Instruction = string(b)
	}
	cfgPath := filepath.Join(dir, ConfigFile)
	if b, err := os.ReadFile(cfgPath); err == nil {
		cfg, warns, cerrs := ParseConfig(cfgPath, b)
		t.Config = cfg
		t.Warnings = append(t.Warnings, warns...)
		errs = append(errs, cerrs...)
		if cfg.Name != "" {
			t.Name = cfg.Name
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, DockerfileFile)); err == nil {
		if !hasFrom(string(b)) {
			errs = append(errs, &FieldError{File: filepath.Join(dir, DockerfileFile), Msg: "has no FROM instruction"})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	id, err := Hash(dir)
	if err != nil {
		return nil, err
	}
	t.ID = id
	return t, nil
}

func hasFrom(dockerfile string) bool {
	for _, l := range strings.Split(dockerfile, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
			return true
		}
	}
	return false
}

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// ParseConfig reads task.toml. Unknown keys become warnings: real tasks carry
// extra metadata, and rejecting them would make t1flow refuse good tasks.
func ParseConfig(file string, b []byte) (Config, []string, Errors) {
	cfg := Config{
		AgentTimeoutSec:    DefaultAgentTimeoutSec,
		VerifierTimeoutSec: DefaultVerifierTimeoutSec,
		BuildTimeoutSec:    DefaultBuildTimeoutSec,
		CPUs:               DefaultCPUs,
		MemoryMB:           DefaultMemoryMB,
		Pids:               DefaultPids,
	}
	var raw map[string]any
	if _, err := toml.Decode(string(b), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return cfg, nil, Errors{{File: file, Msg: fmt.Sprintf("invalid TOML at line %d: %s", pe.Position.Line, pe.Message)}}
		}
		return cfg, nil, Errors{{File: file, Msg: "invalid TOML: " + err.Error()}}
	}
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
	cfg.MemoryMB = int64(p.num("environment.memory_mb", float64(cfg.MemoryMB), 64, MaxMemoryMB))
	cfg.Pids = int64(p.num("environment.pids_limit", float64(cfg.Pids), 16, MaxPids))
	cfg.AllowInternet = p.boolean("environment.allow_internet", false)
	cfg.VerifierEnv = p.strMap("verifier.env")
	p.warnUnknown()
	return cfg, p.warnings, p.errs
}

// known lists the keys t1flow reads, plus Harbor keys it accepts without using.
var known = map[string]bool{
	"version": true, "schema_version": true, "source": true,
	"task": true, "task.name": true, "task.description": true, "task.authors": true, "task.keywords": true,
	"metadata": true,
	"agent":    true, "agent.timeout_sec": true,
	"verifier": true, "verifier.timeout_sec": true, "verifier.env": true, "verifier.user": true,
	"environment": true, "environment.build_timeout_sec": true, "environment.cpus": true,
	"environment.memory_mb": true, "environment.storage_mb": true, "environment.allow_internet": true,
	"environment.pids_limit": true, "environment.gpus": true, "environment.docker_image": true,
	"solution": true, "solution.env": true,
}

type parser struct {
	file     string
	raw      map[string]any
	used     map[string]bool
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

func (p *parser) str(key, def string) string {
	v, ok := p.lookup(key)
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok {
		p.fail(key, fmt.Sprintf("= %v must be a string", v))
		return def
	}
	return s
}

func (p *parser) strs(key string) []string {
	v, ok := p.lookup(key)
	if !ok {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		p.fail(key, fmt.Sprintf("= %v must be a list of strings", v))
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
	v, ok := p.lookup(key)
	if !ok {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(key, fmt.Sprintf("= %v must be a table of strings", v))
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
		p.fail(key, fmt.Sprintf("= %v must be between %v and %v", f, lo, hi))
		return def
	}
	return f
}

func (p *parser) boolean(key string, def bool) bool {
	v, ok := p.lookup(key)
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		p.fail(key, fmt.Sprintf("= %v must be true or false", v))
		return def
	}
	return b
}

// warnUnknown lists keys outside the known set. [metadata] is free-form.
func (p *parser) warnUnknown() {
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			full := k
			if prefix != "" {
				full = prefix + "." + k
			}
			if full == "metadata" || strings.HasPrefix(full, "verifier.env.") || strings.HasPrefix(full, "solution.env.") {
				continue
			}
			if !known[full] {
				p.warnings = append(p.warnings, fmt.Sprintf("%s: unknown key %s (ignored)", p.file, full))
				continue
			}
			if sub, ok := m[k].(map[string]any); ok && full != "verifier.env" && full != "solution.env" {
				walk(full, sub)
			}
		}
	}
	walk("", p.raw)
}

// Hash is the task's content hash: sha256 over every file's relative path,
// executable bit and bytes, in path order. The first 16 hex digits are the task ID.
func Hash(dir string) (string, error) {
	files, err := listFiles(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.rel))
		if err != nil {
			return "", fmt.Errorf("%s: %w", filepath.Join(dir, f.rel), err)
		}
		fmt.Fprintf(h, "%s\x00%t\x00%d\x00", f.rel, f.mode&0o111 != 0, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

type fileEntry struct {
	rel  string
	mode fs.FileMode
}

func listFiles(dir string) ([]fileEntry, error) {
	var out []fileEntry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "__pycache__" || d.Name() == ".git" && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // symlinks and devices are not part of a task
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, fileEntry{rel: filepath.ToSlash(rel), mode: info.Mode()})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, err
}

// Tar writes the subtree sub ("" for all) of dir as a deterministic tar stream,
// with paths relative to sub, each under prefix ("" or "name/").
func Tar(dir, sub, prefix string, w io.Writer) error {
	root := filepath.Join(dir, sub)
	files, err := listFiles(root)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, f := range files {
		// Parent directories first, so extraction gives them sane modes.
		rel := prefix + f.rel
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
					return err
				}
			}
		}
		b, err := os.ReadFile(filepath.Join(root, f.rel))
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if f.mode&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: mode, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return tw.Close()
}

// TarBytes is Tar into memory; tasks are small.
func TarBytes(dir, sub, prefix string) ([]byte, error) {
	var buf bytes.Buffer
	err := Tar(dir, sub, prefix, &buf)
	return buf.Bytes(), err
}

// Untar extracts a tar stream made by Tar into dir, refusing paths that escape it.
func Untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) || filepath.IsAbs(name) {
			return fmt.Errorf("tar entry %q escapes the target directory", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(h.Mode)&0o755)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// LoadAll loads dir as one task, or, when dir holds no task.toml, every task
// directory directly inside it. All errors from all tasks are returned together.
func LoadAll(dir string) ([]*Task, error) {
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err == nil {
		t, err := Load(dir)
		if err != nil {
			return nil, err
		}
		return []*Task{t}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &FieldError{File: dir, Msg: "cannot read: " + errText(err)}
	}
	var tasks []*Task
	var errs Errors
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		t, err := Load(filepath.Join(dir, e.Name()))
		if err != nil {
			var es Errors
			var fe *FieldError
			switch {
			case errors.As(err, &es):
				errs = append(errs, es...)
			case errors.As(err, &fe):
				errs = append(errs, fe)
			default:
				return nil, err
			}
			continue
		}
		tasks = append(tasks, t)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if len(tasks) == 0 {
		return nil, &FieldError{File: dir, Msg: "holds no task (no task.toml in it or in its subdirectories)"}
	}
	return tasks, nil
}
