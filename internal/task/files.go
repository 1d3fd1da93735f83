package task

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

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
