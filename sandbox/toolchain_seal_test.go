package sandbox_test

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/t1flow/t1flow/sandbox"
)

// sealSO compiles, on the host, a shared object whose constructor appends
// its tag to /tmp/t1flow-loaded (the agent would write the same bytes).
func sealSO(t *testing.T, tag string) []byte {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc on the host to build the agent's shared objects")
	}
	dir := t.TempDir()
	src := `#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void init(void) {
	int fd = open("/tmp/t1flow-loaded", O_WRONLY | O_CREAT | O_APPEND, 0666);
	if (fd >= 0) { write(fd, "` + tag + `\n", strlen("` + tag + `\n")); close(fd); }
}
`
	os.WriteFile(filepath.Join(dir, "p.c"), []byte(src), 0o644)
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-s", "-o", filepath.Join(dir, "p.so"), filepath.Join(dir, "p.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "p.so"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestToolchainReadsNoContainerConfiguration plants, as the agent could,
// configuration the C library, OpenSSL and Python read that names code to
// load (an OpenSSL provider in /usr/lib/ssl/openssl.cnf and in a file
// OPENSSL_CONF names, a gconv module for UTF-8), a locale and message
// catalogs of its own, modules that shadow the standard library and the
// guard (in the working directory and in a PYTHONPATH directory), a
// distribution in the working directory whose pytest11 entry point names a
// module of its own, and a line in the container's standard library (which
// a venv over the toolchain's Python used to run). The toolchain's curl,
// Python, pytest, a `uv venv` and bash load none of it, and still work (TLS
// library initialised, C.UTF-8 from the toolchain's archive, the solution's
// own module importable from the working directory, the CTRF plugin
// installed in the venv loaded). The container's own Python and mkdir,
// through the container's C library, do load it: the plants are real.
func TestToolchainReadsNoContainerConfiguration(t *testing.T) {
	r := newRig(t)
	id := r.sandbox(r.baseTag())
	sos := map[string][]byte{"/app/ossl.so": sealSO(t, "openssl.cnf"), "/app/osslenv.so": sealSO(t, "OPENSSL_CONF"), "/app/g.so": sealSO(t, "gconv")}
	var plant strings.Builder
	plant.WriteString("set -e\nmkdir -p /app/pp\n")
	for p, b := range sos {
		plant.WriteString("echo '" + base64.StdEncoding.EncodeToString(b) + "' | base64 -d > " + p + "\n")
	}
	plant.WriteString(`provider() { printf 'openssl_conf = i\n[i]\nproviders = p\n[p]\nevil = e\n[e]\nmodule = %s\nactivate = 1\n' "$1"; }
mkdir -p /usr/lib/ssl && rm -f /usr/lib/ssl/openssl.cnf && provider /app/ossl.so > /usr/lib/ssl/openssl.cnf
provider /app/osslenv.so > /app/evil.cnf
cp -r /usr/lib/locale/C.utf8 /usr/lib/locale/xx_XX.utf8
python3 - <<'PY'
import os, struct
msgs = {b"": b"Content-Type: text/plain; charset=UTF-8\n", b"missing operand": b"AGENT WORDING"}
keys = sorted(msgs)
ids = b"".join(k + b"\0" for k in keys)
strs = b"".join(msgs[k] + b"\0" for k in keys)
n = len(keys); ko = 28; vo = ko + 8 * n; o1 = vo + 8 * n; o2 = o1 + len(ids)
kt, vt = [], []
for k in keys:
    kt += [len(k), o1]; o1 += len(k) + 1
    vt += [len(msgs[k]), o2]; o2 += len(msgs[k]) + 1
mo = struct.pack("7I", 0x950412DE, 0, n, ko, vo, 0, 0) + struct.pack("%dI" % (2 * n), *kt) + struct.pack("%dI" % (2 * n), *vt) + ids + strs
for l in ("C.UTF-8", "C.utf8", "C"):
    os.makedirs("/usr/share/locale/%s/LC_MESSAGES" % l, exist_ok=True)
    open("/usr/share/locale/%s/LC_MESSAGES/coreutils.mo" % l, "wb").write(mo)
PY
for m in json shlex packaging pytest sitecustomize; do echo "open('/tmp/t1flow-loaded', 'a').write('shadow $m\n')" > /app/$m.py; done
echo "open('/tmp/t1flow-loaded', 'a').write('pythonpath sitecustomize\n')" > /app/pp/sitecustomize.py
echo "open('/tmp/t1flow-loaded', 'a').write('shadow email package\n')" > /app/pp/email.py
echo "VALUE = 42" > /app/solution.py
mkdir -p /app/evil-1.0.dist-info /tests
printf 'Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n' > /app/evil-1.0.dist-info/METADATA
printf '[pytest11]\nevil = evilplug\n' > /app/evil-1.0.dist-info/entry_points.txt
echo "open('/tmp/t1flow-loaded', 'a').write('pytest11 entry point\n')" > /app/evilplug.py
echo "def test_ok(): pass" > /tests/test_seal.py
echo "open('/tmp/t1flow-loaded', 'a').write('container stdlib\n')" >> /usr/lib/python3*/json/__init__.py
echo planted
`)
	if code, out := r.exec(id, []string{"bash", "-c", plant.String()}, nil, "/"); code != 0 || !strings.Contains(out, "planted") {
		t.Fatalf("planting: %d %s", code, out)
	}
	m := sandbox.ToolchainMount
	loaded := func() string {
		_, out := r.exec(id, []string{m + "/bin/bash", "-c", m + "/bin/cat /tmp/t1flow-loaded 2>/dev/null; " + m + "/bin/rm -f /tmp/t1flow-loaded"}, sandbox.ToolchainExecEnv, "/")
		return strings.TrimSpace(out)
	}
	// The plants are real: the container's own programs, on its own C
	// library, load and read them.
	_, out := r.exec(id, []string{"bash", "-c", "python3 -c 'import hashlib, json'; OPENSSL_CONF=/app/evil.cnf python3 -c 'import hashlib'; LANG=C.UTF-8 mkdir 2>&1; true"}, nil, "/")
	l := loaded()
	t.Logf("the container's python3 and mkdir: %s; loaded: %q", strings.TrimSpace(out), l)
	if !strings.Contains(l, "openssl.cnf") || !strings.Contains(l, "OPENSSL_CONF") || !strings.Contains(l, "container stdlib") {
		t.Errorf("the container's python3 did not load the planted provider modules or json: the test shows nothing")
	}
	if !strings.Contains(out, "AGENT WORDING") {
		// glibc 2.41 (trixie) no longer translates in C.UTF-8; 2.36
		// (bookworm) does.
		t.Logf("this base's C library does not read catalogs in C.UTF-8: the catalog part shows nothing here")
	}
	// Last: from here on every container program in a UTF-8 locale loads /app/g.so.
	gconv := `g=/usr/lib/x86_64-linux-gnu/gconv
mkdir -p $g/gconv-modules.d && rm -f $g/gconv-modules.cache
printf 'module ISO-10646/UTF8/ INTERNAL /app/g 1\nmodule INTERNAL ISO-10646/UTF8/ /app/g 1\n' > $g/gconv-modules.d/zz.conf
`
	if code, out := r.exec(id, []string{"bash", "-c", gconv}, nil, "/"); code != 0 {
		t.Fatalf("planting gconv: %d %s", code, out)
	}
	r.exec(id, []string{"env", "LANG=C.UTF-8", "python3", "-c", "pass"}, nil, "/")
	if l := loaded(); !strings.Contains(l, "gconv") {
		t.Errorf("the container's python3 did not load the planted gconv module: the test shows nothing (%q)", l)
	}
	env := func(extra ...string) []string {
		return append([]string{m + "/bin/env", "-i", "PATH=" + m + "/bin:/usr/bin:/bin", "HOME=" + m + "/home", "LANG=C.UTF-8"}, extra...)
	}
	py := `import hashlib, ssl, locale, sys, json, shlex, solution
print("hash", hashlib.sha256(b"x").hexdigest()[:8], "ssl", ssl.OPENSSL_VERSION.split()[0])
print("locale", locale.setlocale(locale.LC_ALL, ""), sys.getfilesystemencoding())
try:
    locale.setlocale(locale.LC_ALL, "xx_XX.UTF-8")
    print("container locale used")
except locale.Error:
    print("no container locale")
print("json", json.__file__.startswith("` + m + `/"), "shlex", shlex.__file__.startswith("` + m + `/"))
print("guard", sys.modules["sitecustomize"].__file__.startswith("` + m + `/"), "solution", solution.VALUE)
try:
    import packaging
    print("packaging", packaging.__file__.startswith("` + m + `/"))
except ImportError:
    print("packaging missing")
import email.message
print("email", email.__file__.startswith("` + m + `/"))
`
	checks := []struct {
		name string
		cmd  []string
		want []string
	}{
		{"curl", env(m+"/bin/curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "file:///etc/hostname"), []string{"000"}},
		{"curl OPENSSL_CONF", env("OPENSSL_CONF=/app/evil.cnf", m+"/bin/curl", "-sS", "-o", "/dev/null", "-w", "ok", "file:///etc/hostname"), []string{"ok"}},
		{"python", env("PYTHONPATH=/app/pp", "OPENSSL_CONF=/app/evil.cnf", m+"/bin/python3", "-c", py),
			[]string{"hash 2d711642 ssl OpenSSL", "locale C.UTF-8 utf-8", "no container locale", "json True shlex True", "guard True solution 42", "packaging True", "email True"}},
		{"python -m pytest", env(m+"/bin/python3", "-m", "pytest", "--version"), []string{"pytest 8.4.1"}},
		{"python -m pytest plugins", env(m+"/bin/python3", "-m", "pytest", "-p", "no:cacheprovider", "/tests/test_seal.py"), []string{"1 passed"}},
		// A venv over the toolchain's Python, made where test.sh runs (TB's
		// `uv venv`), with pytest and the CTRF plugin from the wheelhouse.
		{"uv venv", env("UV_CACHE_DIR=/tmp/uvc", m+"/bin/bash", "-c", "uv venv -q /app/.tview && . /app/.tview/bin/activate && uv pip install -q pytest==8.4.1 pytest-json-ctrf==0.3.5 && "+
			"python -c 'import json, sys; print(\"venv json\", json.__file__.startswith(\""+m+"/\"))' && pytest -p no:cacheprovider --ctrf /tmp/ctrf.json /tests/test_seal.py"),
			[]string{"venv json True", "1 passed"}},
		{"bash", env(m+"/bin/bash", "--norc", "--noprofile", "-c", "x=é; echo len ${#x}; mkdir 2>&1; true"), []string{"len 1", "mkdir: missing operand"}},
	}
	for _, c := range checks {
		code, out := r.exec(id, c.cmd, sandbox.ToolchainExecEnv, "/app")
		t.Logf("%s: exit %d: %s", c.name, code, strings.TrimSpace(out))
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in its output", c.name, w)
			}
		}
		if l := loaded(); l != "" {
			t.Errorf("%s loaded or ran what the agent planted:\n%s", c.name, l)
		}
	}
}
