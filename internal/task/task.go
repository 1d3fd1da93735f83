// Package task parses, validates and fingerprints tasks in the Harbor format:
// instruction.md, task.toml, environment/Dockerfile, solution/solve.sh and
// tests/test.sh plus test files.
package task

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Required files, relative to the task directory.
const (
	InstructionFile = "instruction.md"
	ConfigFile      = "task.toml"
	DockerfileFile  = "environment/Dockerfile"
	SolutionFile    = "solution/solve.sh"
	TestScriptFile  = "tests/test.sh"
)

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
	t := &Task{Dir: dir, Name: filepath.Base(filepath.Clean(dir))}
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
	for _, f := range []string{InstructionFile, ConfigFile, DockerfileFile, SolutionFile, TestScriptFile} {
		p := filepath.Join(dir, f)
		fi, err := os.Stat(p)
		switch {
		case err != nil && f == DockerfileFile && t.Config.DockerImage != "":
			// Harbor: environment.docker_image makes the Dockerfile optional.
		case err != nil:
			errs = append(errs, &FieldError{File: p, Msg: "missing (every Harbor task needs it)"})
		case fi.IsDir():
			errs = append(errs, &FieldError{File: p, Msg: "is a directory, expected a file"})
		case fi.Size() == 0 && f != SolutionFile:
			errs = append(errs, &FieldError{File: p, Msg: "is empty"})
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, InstructionFile)); err == nil {
		t.Instruction = string(b)
	}
	if b, err := os.ReadFile(filepath.Join(dir, TestScriptFile)); err == nil {
		if v, line := RequestedPython(string(b)); v != "" {
			t.Config.VerifierPython = v
			if _, approx := VerifierBase(v); approx != "" {
				t.Warnings = append(t.Warnings, fmt.Sprintf("%s:%d: asks uv for Python %s, which the offline sealed verifier does not have: %s (docs/task-format.md, \"Verification\")", filepath.Join(dir, TestScriptFile), line, v, approx))
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, DockerfileFile)); err == nil {
		if !hasFrom(string(b)) {
			errs = append(errs, &FieldError{File: filepath.Join(dir, DockerfileFile), Msg: "has no FROM instruction"})
		}
		t.Warnings = append(t.Warnings, baseWarnings(filepath.Join(dir, DockerfileFile), string(b))...)
	} else if img := t.Config.DockerImage; img != "" {
		t.Warnings = append(t.Warnings, baseWarnings(cfgPath+": environment.docker_image", "FROM "+img)...)
	}
	cw, cerrs := checkCompose(dir)
	t.Warnings = append(t.Warnings, cw...)
	errs = append(errs, cerrs...)
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
