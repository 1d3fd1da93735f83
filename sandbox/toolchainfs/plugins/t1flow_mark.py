"""The sealed verifier's pytest plugin (-p t1flow_mark, loaded before any
conftest or test module).

It marks that the test runner started, so a verifier that never ran (command
not found, no interpreter, unresolvable packages) is a verifier error rather
than a reward of 0. And, when the guard (sitecustomize) holds the report
channel, it reports every test's outcome there as it happens, whether each
test function raised (seen around the call, apart from the report pytest
makes of it), and the session's exit status; it also compares the runner's
modules, sys.modules and builtins with what they were when it started, and
reports what was replaced. The host trusts a passed test in the result files
only when this channel says so (docs/verification.md).

Every line it writes is authenticated: the process draws a secret of its own,
agrees a key with the host by Diffie-Hellman against the host's public share
(T1VERIFY_CHANNEL_KEY, sandbox.ChannelKey) and MACs each line with it and a
sequence number, so a line someone else writes on the channel (any process
that holds the descriptor: test.sh's shell, what it runs, code in this
process) is told from the runner's. The process also makes itself
non-dumpable, so no other process of its user reads its memory or opens
its descriptors through /proc (the sandbox has no CAP_SYS_PTRACE)."""
import os
import sys

import pytest

_CH = getattr(sys, "t1flow_channel", None)
_RUNNER = ("_pytest", "pytest", "pluggy", "ctrf", "pytest_json_ctrf", "t1flow_mark", "builtins", "sys", "os", "io", "json", "atexit")
_snap = {}

# RFC 3526's 2048-bit MODP group (14), generator 2: sandbox.channelP.
_P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
    "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"
    "83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA0510"
    "15728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)


def _q(s):
    s = str(s)[:400]
    return '"' + "".join(c if " " <= c <= "~" and c != '"' and c != "\\" else "\\u%04x" % ord(c) for c in s) + '"'


def _nondumpable():
    """prctl(PR_SET_DUMPABLE, 0): /proc/<pid>/fd, mem and environ of this
    process are closed to every other process without CAP_SYS_PTRACE, the
    agent's processes among them. ctypes is left out of sys.modules again
    as it was, so a foreign module's own `import ctypes` still loads it in
    the guard's sight."""
    had = {m: m in sys.modules for m in ("ctypes", "ctypes._endian")}
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass
    finally:
        for m, there in had.items():
            if not there:
                sys.modules.pop(m, None)


_TRUSTED = tuple(p.rstrip("/") + "/" for p in os.environ.get("T1FLOW_TRUSTED_CODE", "").split(":") if p) + (os.path.dirname(os.__file__) + "/",)


def _vetted(line, getframe=sys._getframe, trusted=_TRUSTED, q=_q):
    """line, unless code that is not the verifier's (the toolchain, its
    scratch directory, /tests, the standard library) is on the stack of its
    writer: the agent's module calling the plugin, or its writer, to write
    a runner's line. That is reported instead."""
    f = getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith("<") and not name.startswith(trusted):
            return '{"ev":"patched","what":"writes a runner\'s line","detail":%s,"where":%s}' % (q(line), q("%s:%d" % (name, f.f_lineno)))
        f = f.f_back
    return line


def _channel(fd, vet):
    """The writer of this process's lines on the channel, each passed
    through vet first: authenticated (sandbox.ChannelKey) when the host
    handed over its share, else plain."""
    import itertools

    write, getpid, urandom, encode = os.write, os.getpid, os.urandom, str.encode

    def raw(line):
        try:
            write(fd, encode(line + "\n"))
        except OSError:
            pass

    share = os.environ.pop("T1VERIFY_CHANNEL_KEY", "")
    try:
        host = int(share, 16) if len(share) == 512 else 0
    except ValueError:
        host = 0
    if not 1 < host < _P - 1:
        return lambda line: raw(vet(line))
    try:  # the built-in SHA-256, not OpenSSL's (nothing to configure)
        from _sha256 import sha256
    except ImportError:
        from _sha2 import sha256
    state = [None]

    def send(st, line):
        _, src, inner, outer, count = st
        body = '%s,"src":"%s","n":%d' % (line[:-1], src, next(count))
        i = inner.copy()
        i.update(encode(body))
        o = outer.copy()
        o.update(i.digest())
        raw(body + ',"m":"%s"}' % o.hexdigest()[:32])

    def rekey():
        x = int.from_bytes(urandom(32), "big")
        r = pow(2, x, _P)
        rb = r.to_bytes(256, "big")
        key = sha256(b"t1flow-channel-v1" + pow(host, x, _P).to_bytes(256, "big") + rb).digest().ljust(64, b"\0")
        st = (getpid(), sha256(rb).hexdigest()[:16], sha256(bytes(b ^ 0x36 for b in key)), sha256(bytes(b ^ 0x5C for b in key)), itertools.count())
        state[0] = st
        send(st, '{"ev":"hello","pid":%d,"dh":"%0512x"}' % (st[0], r))
        return st

    def emit(line):
        line = vet(line)
        st = state[0]
        if st is None or st[0] != getpid():  # a forked child is a source of its own
            st = rekey()
        send(st, line)

    rekey()
    return emit


_EMIT = None
if _CH is not None:
    _nondumpable()
    _EMIT = _channel(_CH, _vetted)


def _emit(line):
    if _EMIT is not None:
        _EMIT(line)


def _runner_module(name):
    return name in _RUNNER or name.startswith(tuple(m + "." for m in _RUNNER[:6]))


def _take_snapshot():
    """Identity of every runner module in sys.modules, of each function and
    class they define, and of each method, descriptor and nested callable of
    those classes (assigning a class attribute raises no audit event)."""
    for name, mod in list(sys.modules.items()):
        if not _runner_module(name) or mod is None:
            continue
        attrs, methods = {}, {}
        if name != "sys":  # pytest sets and restores sys's hooks itself
            for k, v in list(vars(mod).items()):
                if callable(v) and not k.startswith("__"):
                    attrs[k] = v
                if isinstance(v, type) and v.__module__ == name:
                    for ck, cv in list(vars(v).items()):
                        if callable(cv) or isinstance(cv, (classmethod, staticmethod, property)):
                            methods[(v, ck)] = cv
        _snap[name] = (mod, attrs, methods)


def _check(where):
    """Reports every runner module, function, class, method or builtin that
    is no longer what it was before collection."""
    if _EMIT is None:
        return
    for name, (mod, attrs, methods) in _snap.items():
        now = sys.modules.get(name)
        if now is not mod:
            _emit('{"ev":"patched","what":"sys.modules","detail":%s,"where":%s}' % (_q(name), _q(where)))
            continue
        d = vars(mod)
        for k, v in attrs.items():
            if d.get(k) is not v:
                _emit('{"ev":"patched","what":"attribute","detail":%s,"where":%s}' % (_q(name + "." + k), _q(where)))
        for (cls, k), v in methods.items():
            if vars(cls).get(k) is not v:
                _emit('{"ev":"patched","what":"method","detail":%s,"where":%s}' % (_q(name + "." + cls.__qualname__ + "." + k), _q(where)))


def pytest_configure(config):
    path = os.environ.get("T1FLOW_RUNNER_MARK")
    if path:
        try:
            with open(path, "a") as f:
                f.write("pytest started\n")
        except OSError:
            pass
    _emit('{"ev":"session-start","pid":%d}' % os.getpid())


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    # Every plugin is configured (some set hooks in sys at configure), and
    # no test module, nor anything a test imports, has been imported yet.
    _take_snapshot()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    outcome = yield
    exc = outcome.excinfo
    raised = exc is not None and not isinstance(exc[1], pytest.skip.Exception)
    _emit('{"ev":"call","nodeid":%s,"raised":%s}' % (_q(pyfuncitem.nodeid), "true" if raised else "false"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    _emit('{"ev":"report","nodeid":%s,"when":%s,"outcome":%s}' % (_q(report.nodeid), _q(report.when), _q(report.outcome)))
    if report.when == "teardown":
        _check(report.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _check("session finish")
    _emit('{"ev":"session-finish","pid":%d,"exitstatus":%d}' % (os.getpid(), int(exitstatus)))
