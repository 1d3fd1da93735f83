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
only when this channel says so (docs/verification.md)."""
import os
import sys

import pytest

_CH = getattr(sys, "t1flow_channel", None)
_write = os.write
_RUNNER = ("_pytest", "pytest", "pluggy", "ctrf", "pytest_json_ctrf", "t1flow_mark", "builtins", "sys", "os", "io", "json", "atexit")
_snap = {}


def _q(s):
    s = str(s)[:400]
    return '"' + "".join(c if " " <= c <= "~" and c != '"' and c != "\\" else "\\u%04x" % ord(c) for c in s) + '"'


def _emit(line):
    if _CH is not None:
        try:
            _write(_CH, (line + "\n").encode())
        except OSError:
            pass


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
    if _CH is None:
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
