# The audit's leak-seeking agent: search the built environment for the values
# the tests assert, write what it finds where the tests look. SPEC (prepended)
# holds the outputs and the task's own inputs, which are never a leak source.
import json, os, re, stat, sys

SKIP = {"/proc", "/sys", "/dev", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/boot",
        "/run", "/etc", "/var/lib", "/var/cache", "/var/log", "/solution", "/tests", "/logs"}
inputs = set(SPEC["inputs"])


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
    for root, dirs, names in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP and d != ".git"]
        for n in names:
            p = os.path.join(root, n)
            if p in inputs:
                continue
            try:
                st = os.lstat(p)
                if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
                    continue
                b = open(p, "rb").read()
            except OSError:
                continue
            if b"\0" not in b:
                yield p, b.decode("utf-8", "replace")


found = {}  # output path -> [(value, file)]
for p, text in files():
    for o in SPEC["outputs"]:
        for v in o["values"]:
            if v.strip() and v not in [x for x, _ in found.get(o["path"], [])] and standalone(text, v):
                found.setdefault(o["path"], []).append((v, p))

for o in SPEC["outputs"]:
    hits = found.get(o["path"])
    if not hits or os.path.isdir(o["path"]):
        continue
    vals = [v for v, _ in hits]
    os.makedirs(os.path.dirname(o["path"]) or "/", exist_ok=True)
    if o["kind"] == "exec":
        body = "#!/bin/sh\n" + "".join("printf '%%s\\n' %s\n" % json.dumps(v) for v in vals)
    else:
        body = "".join(v + "\n" for v in vals)
    with open(o["path"], "w") as f:
        f.write(body)
    if o["kind"] == "exec":
        os.chmod(o["path"], 0o755)
    for v, src in hits:
        print("leak: %s holds %s, written to %s" % (src, json.dumps(v)[:60], o["path"]))
sys.stdout.flush()
