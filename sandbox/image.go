package sandbox

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/task"
)

// DefaultAliases point registry bases that tasks commonly name at the local
// base images (task.DefaultBases): nothing is ever pulled. "@name" is the
// base t1flow builds under that name; "@base" is bookworm.
var DefaultAliases = func() map[string]string {
	m := map[string]string{}
	for _, b := range task.DefaultBases {
		m[b.Pattern] = "@" + b.Base
	}
	return m
}()

var fromLine = regexp.MustCompile(`(?i)^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$`)

// RewriteFrom maps each FROM image through the alias map. Stage names stay as
// they are. used lists the images the build needs; bases the local bases
// among them, by name, to build first.
func (d *Docker) RewriteFrom(dockerfile string) (out string, used, bases []string, err error) {
	lines := strings.Split(dockerfile, "\n")
	stages := map[string]bool{}
	for i, l := range lines {
		m := fromLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		img, rest := m[3], m[4]
		if stages[strings.ToLower(img)] {
			continue
		}
		target := d.alias(img)
		if name, ok := strings.CutPrefix(target, "@"); ok {
			if name == "base" {
				name = task.BaseBookworm
			}
			if !knownBase(name) {
				return "", nil, nil, fmt.Errorf("FROM %s: the image alias %s names no base t1flow builds (use @%s, @%s, @%s or @%s)", img, target, task.BaseBookworm, task.BaseTrixie, task.BasePythonBookworm, task.BasePythonTrixie)
			}
			target = BaseTag(name)
			bases = append(bases, name)
		}
		lines[i] = m[1] + m[2] + target + rest
		used = append(used, target)
		// Later FROMs may name this stage.
		if f := strings.Fields(rest); len(f) == 2 && strings.EqualFold(f[0], "AS") {
			stages[strings.ToLower(f[1])] = true
		}
	}
	if len(used) == 0 {
		return "", nil, nil, errors.New("has no FROM instruction")
	}
	return strings.Join(lines, "\n"), used, bases, nil
}

func (d *Docker) alias(img string) string {
	if v, ok := d.Aliases[img]; ok {
		return v
	}
	ms := make([]task.BaseMapping, 0, len(d.Aliases))
	for p, v := range d.Aliases {
		ms = append(ms, task.BaseMapping{Pattern: p, Base: v})
	}
	// Longest pattern first (ties by name, so the choice is stable), so
	// "python:3.11-slim" can beat "python:*".
	sort.Slice(ms, func(i, j int) bool { return ms[i].Pattern < ms[j].Pattern })
	if m, ok := task.MatchBase(ms, img); ok {
		return m.Base
	}
	return img
}

// TaskImageTag is the cached image for a task: its content hash plus the hash
// of the alias targets it was built from.
func TaskImageTag(taskID, fromHash string) string {
	return "t1flow-task:" + taskID + "-" + fromHash
}

// EnsureTaskImage builds the task's environment/Dockerfile once, with FROM
// lines pointed at local images. A Dockerfile step that fails is the task's
// fault (TaskInvalid); a daemon that fails is infrastructure.
func (d *Docker) EnsureTaskImage(ctx context.Context, t *task.Task, progress func(string)) (string, bool, error) {
	if img := t.Config.DockerImage; img != "" {
		// task.toml's prebuilt image, when the host has it: never pulled.
		if ok, err := d.imageExists(ctx, img); err != nil {
			return "", false, errs.Infraf("docker image inspect %s: %v", img, err)
		} else if ok {
			return img, false, nil
		}
	}
	raw, err := os.ReadFile(filepath.Join(t.Dir, task.DockerfileFile))
	switch {
	case errors.Is(err, fs.ErrNotExist) && t.Config.DockerImage != "":
		// Harbor's docker_image without a Dockerfile: the image itself,
		// through the alias map, since the host does not have it.
		raw = []byte("FROM " + t.Config.DockerImage + "\n")
	case err != nil:
		return "", false, errs.TaskInvalidf("%s: %v", task.DockerfileFile, err)
	}
	df, used, bases, err := d.RewriteFrom(string(raw))
	if err != nil {
		return "", false, errs.TaskInvalidf("%s: %v", task.DockerfileFile, err)
	}
	if vb, _ := task.VerifierBase(t.Config.VerifierPython); vb != "" {
		// The sandbox's toolchain comes from this base (SandboxToolchain):
		// built here, with the image, not inside the sandbox's creation.
		bases = append(bases, vb)
	}
	for _, b := range bases {
		if _, err := d.EnsureBase(ctx, b); err != nil {
			return "", false, errs.Infraf("base image %s: %v", b, err)
		}
	}
	h := sha256.Sum256([]byte(df))
	tag := TaskImageTag(t.ID, hex.EncodeToString(h[:])[:8])
	built := false
	_, err, _ = d.builds.Do(tag, func() (any, error) {
		if ok, err := d.imageExists(ctx, tag); err != nil {
			return nil, errs.Infraf("docker image inspect %s: %v", tag, err)
		} else if ok {
			return nil, nil
		}
		for _, u := range used {
			ok, err := d.imageExists(ctx, u)
			if err != nil {
				return nil, errs.Infraf("docker image inspect %s: %v", u, err)
			}
			if !ok {
				return nil, errs.TaskInvalidf("%s: FROM %s is not available offline and nothing is ever pulled: build it locally or add an image alias for it", task.DockerfileFile, u)
			}
		}
		built = true
		return nil, d.build(ctx, t, df, tag, progress)
	})
	return tag, built, err
}

func (d *Docker) build(ctx context.Context, t *task.Task, dockerfile, tag string, progress func(string)) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(tarContext(filepath.Join(t.Dir, "environment"), dockerfile, pw))
	}()
	bctx, cancel := context.WithTimeout(ctx, time.Duration(t.Config.BuildTimeoutSec*float64(time.Second)))
	defer cancel()
	resp, err := d.Client.ImageBuild(bctx, pr, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Version:     build.BuilderV1,
		Labels:      map[string]string{LabelTask: t.ID},
	})
	if err != nil {
		return errs.Infraf("docker build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	var tail []string
	dec := jsonmessage.DisplayJSONMessagesStream
	lw := &lineWriter{fn: func(l string) {
		tail = append(tail, l)
		if len(tail) > 20 {
			tail = tail[1:]
		}
		if progress != nil {
			progress(l)
		}
	}}
	if err := dec(resp.Body, lw, 0, false, nil); err != nil {
		return buildError(ctx, bctx, err, t, tag, tail)
	}
	return nil
}

// buildError classifies a failed build. A build cut short by its caller (the
// activity cancelled, a worker stopping past its stop timeout, the
// activity's own deadline) is infrastructure, retried elsewhere: never the
// task's fault, whatever the daemon said as the stream closed. Only the
// task's own build_timeout_sec, or a Dockerfile step that fails, is.
func buildError(ctx, bctx context.Context, err error, t *task.Task, tag string, tail []string) error {
	if ctx.Err() != nil {
		return errs.Infraf("docker build %s: cancelled before it finished (%v): retry it", tag, context.Cause(ctx))
	}
	if bctx.Err() != nil {
		return errs.TaskInvalidf("%s: build did not finish within environment.build_timeout_sec = %v", task.DockerfileFile, t.Config.BuildTimeoutSec)
	}
	var jerr *jsonmessage.JSONError
	if errors.As(err, &jerr) {
		return errs.TaskInvalidf("%s: build failed: %s\n%s", task.DockerfileFile, jerr.Message, strings.Join(tail, "\n"))
	}
	return errs.Infraf("docker build %s: %v", tag, err)
}

type lineWriter struct {
	fn  func(string)
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		if l := strings.TrimSpace(string(w.buf[:i])); l != "" {
			w.fn(l)
		}
		w.buf = w.buf[i+1:]
	}
}

// tarContext writes the build context (the environment/ directory, which a
// docker_image task may lack) with the rewritten Dockerfile in place of the
// original.
func tarContext(envDir, dockerfile string, w io.Writer) error {
	tw := tar.NewWriter(w)
	add := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := add("Dockerfile", 0o644, []byte(dockerfile)); err != nil {
		return err
	}
	err := filepath.WalkDir(envDir, func(p string, de fs.DirEntry, err error) error {
		if p == envDir && errors.Is(err, fs.ErrNotExist) {
			return fs.SkipAll
		}
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(envDir, p)
		rel = filepath.ToSlash(rel)
		if rel == "Dockerfile" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		return add(rel, int64(info.Mode().Perm()), b)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
