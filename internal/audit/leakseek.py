# The audit's leak-seeking agent: search the built environment for the values
# the tests assert, write what it finds where the tests look. SPEC (prepended)
# holds the outputs and the task's own inputs, which are never a leak source.
# Only what the task's image holds is searched: not the system's own trees
# (SKIP), not what is mounted read-only into the sandbox (t1flow's sealed verifier
# toolchain, Docker's /etc/hosts: they are not the task's). Installed
# packages (site-packages, node_modules) are searched only for long values
# (LONG characters or more: hashes, sentences): their source is full of small
# numbers and words that would pass for almost any short expected value.
import json, os, re, stat, sys

ROOT = SPEC.get("root", "/")
PACKAGES = {"site-packages", "dist-packages", "node_modules"}
LONG = 8
SKIP = {"/proc", "/sys", "/dev", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/boot",
        "/run", "/etc", "/var/lib", "/var/cache", "/var/log", "/solution", "/tests", "/logs"}
inputs = set(SPEC["inputs"])


def mount_points():
    """Read-only mount points other than the root, from /proc/self/mountinfo
    (field 5, options in field 6): what the harness binds in sealed. A
    writable volume may carry the task's data and is searched."""
    if ROOT != "/":
        return set()
    try:
        lines = open("/proc/self/mountinfo").read().splitlines()
    except OSError:
        return set()
    out = set()
    for l in lines:
        f = l.split(" ")
        if len(f) > 5 and f[4] != "/" and "ro" in f[5].split(","):
            out.add(f[4].replace("\\040", " "))
    return out


SKIP |= mount_points()


def real(p):
    """The host path of an image path under ROOT."""
    return os.path.join(ROOT, p.lstrip("/"))


def standalone(text, v):
    """v is a whole file, a whole line, or the value of a key on a line."""
    if text.strip() == v:
        return True
    key = r'(^|[{,])\s*["\']?[\w .-]+["\']?\s*[:=]\s*["\']?'
    for line in text.splitlines():
        s = line.strip()
        if s == v:
            return True
        if v in s and re.search(key + re.escape(v) + r'["\']?\s*($|[,}])', s):
            return True
    return False


def files():
    for root, dirs, names in os.walk(ROOT):
        r = os.path.relpath(root, ROOT)
        rel = "/" if r == "." else "/" + r
        dirs[:] = [d for d in dirs if os.path.join(rel, d) not in SKIP and d not in (".git", "__pycache__")]
        in_package = any(part in PACKAGES for part in rel.split("/"))
        for n in names:
            p, full = os.path.join(rel, n), os.path.join(root, n)
            if p in inputs or p in SKIP:
                continue
            try:
                st = os.lstat(full)
                if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
                    continue
                b = open(full, "rb").read()
            except OSError:
                continue
            if b"\0" not in b:
                yield p, b.decode("utf-8", "replace"), in_package


found = {}  # output path -> [(value, file)]
for p, text, in_package in files():
    for o in SPEC["outputs"]:
        for v in o["values"]:
            if in_package and len(v.strip()) < LONG:
                continue
            if v.strip() and v not in [x for x, _ in found.get(o["path"], [])] and standalone(text, v):
                found.setdefault(o["path"], []).append((v, p))

for o in SPEC["outputs"]:
    hits = found.get(o["path"])
    out = real(o["path"])
    if not hits or os.path.isdir(out):
        continue
    vals = [v for v, _ in hits]
    os.makedirs(os.path.dirname(out) or "/", exist_ok=True)
    if o["kind"] == "exec":
        body = "#!/bin/sh\n" + "".join("printf '%%s\\n' %s\n" % json.dumps(v) for v in vals)
    else:
        body = "".join(v + "\n" for v in vals)
    with open(out, "w") as f:
        f.write(body)
    if o["kind"] == "exec":
        os.chmod(out, 0o755)
    for v, src in hits:
        print("leak: %s holds %s, written to %s" % (src, json.dumps(v)[:60], o["path"]))
sys.stdout.flush()
