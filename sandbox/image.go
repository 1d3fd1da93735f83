package sandbox

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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

// DefaultAliases point registry bases that tasks commonly name at the local base
// image: nothing is ever pulled.
var DefaultAliases = map[string]string{
	"ubuntu:*":         "@base",
	"ubuntu":           "@base",
	"debian:*":         "@base",
	"debian":           "@base",
	"python:*":         "@base",
	"buildpack-deps:*": "@base",
	"bash:*":           "@base",
}

var fromLine = regexp.MustCompile(`(?i)^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$`)

// RewriteFrom maps each FROM image through the alias map. Stage names stay as they are.
func (d *Docker) RewriteFrom(dockerfile, base string) (string, []string, error) {
	lines := strings.Split(dockerfile, "\n")
	stages := map[string]bool{}
	var used []string
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
		if target == "@base" {
			target = base
		}
		lines[i] = m[1] + m[2] + target + rest
		used = append(used, target)
		// Later FROMs may name this stage.
		if f := strings.Fields(rest); len(f) == 2 && strings.EqualFold(f[0], "AS") {
			stages[strings.ToLower(f[1])] = true
		}
	}
	if len(used) == 0 {
		return "", nil, errors.New("has no FROM instruction")
	}
	return strings.Join(lines, "\n"), used, nil
}

func (d *Docker) alias(img string) string {
	if v, ok := d.Aliases[img]; ok {
		return v
	}
	// Longest pattern first, so "python:3.11-slim" can beat "python:*".
	pats := make([]string, 0, len(d.Aliases))
	for p := range d.Aliases {
		pats = append(pats, p)
	}
	sort.Slice(pats, func(i, j int) bool { return len(pats[i]) > len(pats[j]) })
	for _, p := range pats {
		if globMatch(p, img) {
			return d.Aliases[p]
		}
	}
	return img
}

func globMatch(pat, s string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pat), `\*`, ".*") + "$"
	ok, _ := regexp.MatchString(re, s)
	return ok
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
	base, err := d.EnsureBaseImage(ctx)
	if err != nil {
		return "", false, errs.Infraf("base image: %v", err)
	}
	dfPath := filepath.Join(t.Dir, task.DockerfileFile)
	raw, err := os.ReadFile(dfPath)
	if err != nil {
		return "", false, errs.TaskInvalidf("%s: %v", task.DockerfileFile, err)
	}
	df, used, err := d.RewriteFrom(string(raw), base)
	if err != nil {
		return "", false, errs.TaskInvalidf("%s: %v", task.DockerfileFile, err)
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
		if bctx.Err() != nil {
			return errs.TaskInvalidf("%s: build did not finish within environment.build_timeout_sec = %v", task.DockerfileFile, t.Config.BuildTimeoutSec)
		}
		var jerr *jsonmessage.JSONError
		if errors.As(err, &jerr) {
			return errs.TaskInvalidf("%s: build failed: %s\n%s", task.DockerfileFile, jerr.Message, strings.Join(tail, "\n"))
		}
		return errs.Infraf("docker build %s: %v", tag, err)
	}
	return nil
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

// tarContext writes the build context (the environment/ directory) with the
// rewritten Dockerfile in place of the original.
func tarContext(envDir, dockerfile string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(envDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(envDir, p)
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "Dockerfile" {
			b = []byte(dockerfile)
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
