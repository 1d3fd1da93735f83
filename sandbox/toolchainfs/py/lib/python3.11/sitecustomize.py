"""The sealed verifier's guard, imported by the toolchain's Python at start-up
(the standard library directory, ahead of every site-packages, and before any
test or agent code runs; the toolchain's site-packages holds a .pth file that
imports it by its path before site.py looks for it by name, so a PYTHONPATH
entry of the agent's cannot shadow it).

It always seals imports (_t1flow_seal_imports: no directory of the agent's
shadows a module of the standard library's or the runner's, or names a
pytest plugin through a distribution's entry points). Only when the
verifier hands this process its report channel
(T1FLOW_CHANNEL_FD, an inherited socket to the verifier's relay, which
passes its lines on to the host, outside every file in the sandbox) does it
guard: it takes the channel (a private,
non-inheritable copy; the variable and the inherited descriptor are
dropped, so programs the tests start never get it), puts itself and all
it will start in a Landlock domain of their own (_t1flow_confine: no process
of theirs can reach test.sh's through /proc or ptrace) and installs a PEP 578
audit hook, which Python code cannot remove. The hook writes evidence to the
channel, before the act it audits takes effect, when code from outside the
verifier (any file not in the toolchain, the verifier's scratch directory or
/tests: the agent's modules that tests import) writes, moves or removes files
in the results directory, reaches the interpreter's memory through ctypes,
replaces a function's code or a special attribute of the runner's classes, builds
code objects, walks the runner's frames or lists the interpreter's objects
(gc). The t1flow_mark pytest plugin reports every test through the same
channel. See docs/verification.md.
"""


def _t1flow_seal_imports():
    """Top-level modules the verifier's own directories provide (the standard
    library, pytest and its dependencies, the plugins, the environments uv
    builds in the verifier's scratch directory) are found there and nowhere
    else. Every other directory on sys.path (the working directory, which
    `python3 -m pytest` and `python3 -c` put first; a PYTHONPATH entry; one a
    test inserts to import the solution) gets a path-entry finder that does
    not see those names: /app/shlex.py is not the shlex pytest imports, nor
    /app/sitecustomize.py this module (the .pth file in the toolchain's
    site-packages imports it by its path before site.py looks for it by
    name). Modules of other names, the solution's, are found there as
    before; a module of the task's that shares a standard library name is
    the one thing a test can no longer import by that name. /tests, the
    task's own, is left as it is. A path hook, not a sys.meta_path finder:
    pytest's assertion rewriter, which it puts first on sys.meta_path,
    searches sys.path with PathFinder, and so goes through it too.
    importlib.metadata's search of sys.path skips those other directories
    too, but for the interpreter's own site-packages: a distribution there
    names entry points (pytest11) that pytest imports, whatever their
    names."""
    import sys

    if getattr(sys, "t1flow_sealed_imports", False):
        return
    # Only modules that are built in, frozen or already loaded: any other
    # would be looked up on sys.path, before this seal is in place.
    import os
    from _frozen_importlib_external import FileFinder, PathFinder, _get_supported_file_loaders
    from zipimport import zipimporter

    verifier = ("/.t1flow-verifier/", "/tmp/.t1flow-verify/")
    tests = ("/tests/",)
    builtin = frozenset(sys.builtin_module_names)
    realpath, getcwd, isdir, str_ = os.path.realpath, os.getcwd, os.path.isdir, str
    kinds = {}

    def kind(entry):
        """"verifier", "tests" or "other" for a sys.path entry."""
        if entry == "":
            try:
                entry = getcwd()
            except OSError:
                return "other"
        k = kinds.get(entry)
        if k is None:
            p = realpath(entry).rstrip("/") + "/"
            k = "verifier" if p.startswith(verifier) else "tests" if p.startswith(tests) else "other"
            kinds[entry] = k
        return k

    def verifiers_have(name):
        if name in builtin:
            return True
        entries = [e for e in sys.path if isinstance(e, str_) and kind(e) == "verifier"]
        try:
            spec = PathFinder.find_spec(name, entries)
        except Exception:
            return False
        return spec is not None and spec.loader is not None

    class _SealedFileFinder(FileFinder):
        def find_spec(self, fullname, target=None):
            if "." not in fullname and verifiers_have(fullname):
                return None
            return super().find_spec(fullname, target)

    class _SealedZipImporter(zipimporter):
        def find_spec(self, fullname, target=None):
            if "." not in fullname and verifiers_have(fullname):
                return None
            return super().find_spec(fullname, target)

    file_hook = _SealedFileFinder.path_hook(*_get_supported_file_loaders())

    def hook(entry):
        if kind(entry) != "other":
            raise ImportError("the verifier's own directory", path=entry)
        if isdir(entry):
            return file_hook(entry)
        return _SealedZipImporter(entry)  # ZipImportError (an ImportError) unless a zip file

    sys.path_hooks.insert(0, hook)
    for entry in list(sys.path_importer_cache):
        if isinstance(entry, str_) and kind(entry) == "other":
            del sys.path_importer_cache[entry]

    # Installed distributions, as importlib.metadata finds them on sys.path,
    # name code to load: pytest imports every "pytest11" entry point at
    # start-up (and pygments its plugins'). One in the working directory
    # (/app/evil-1.0.dist-info naming /app/evilplug.py) or another directory
    # of the agent's on sys.path would run the agent's module in the runner,
    # whatever its name. A search of sys.path (the default) sees only the
    # verifier's directories, /tests and the site-packages of the running
    # interpreter (a venv's, where test.sh installs its plugins); a caller
    # that names its own path gets what it asked for.
    metadata_finder = PathFinder.find_distributions
    site_dirs = []

    def site_dir(entry):
        if not site_dirs:
            site_dirs.append(None)  # looked up once, even if there are none
            try:
                site_dirs.extend(realpath(p) for p in sys.modules["site"].getsitepackages())
            except Exception:
                pass
        return realpath(entry or ".") in site_dirs

    def find_distributions(*args, **kwargs):
        from importlib.metadata import DistributionFinder

        if args:
            context = args[0]
        elif "context" in kwargs:
            context = kwargs["context"]
        else:
            context = DistributionFinder.Context(**kwargs)
        if "path" not in vars(context):
            path = [e for e in sys.path if isinstance(e, str_) and (kind(e) != "other" or site_dir(e))]
            context = DistributionFinder.Context(**dict(vars(context), path=path))
        return metadata_finder(context)

    PathFinder.find_distributions = staticmethod(find_distributions)
    sys.t1flow_sealed_imports = True


_t1flow_seal_imports()
del _t1flow_seal_imports


def _t1flow_confine():
    """Puts this process, and every process it starts from now on, in a
    Landlock domain of its own (before any test or solution code runs: only
    the runner, which holds the channel, does this). Landlock lets a process
    in a domain reach through ptrace_may_access (PTRACE_ATTACH, and
    /proc/<pid>/mem, fd, environ, maps, exe, syscall of another process)
    only processes in the same domain or one nested in it: a process the
    solution starts can no longer write the memory of test.sh's bash,
    timeout or uv (dumpable, holding the channel's socket) nor reopen their
    descriptors: an open and a write, which no seccomp profile can refuse.
    What the domain handles costs tests nothing: LANDLOCK_ACCESS_FS_REFER
    alone, allowed beneath / (a domain that handles any file access refuses
    to move a file across directories unless a rule grants REFER there, and
    ABI 1 has no REFER to grant: not used). Signals and
    abstract Unix sockets are not scoped: a test that stops a server
    test.sh started, or talks to the agent's service on an abstract socket,
    works as before; killing the relay or test.sh from here only loses the
    runner's later lines, which the host counts against the results.

    Returns the Landlock ABI in force (from 2), or why there is none: the
    kernel (before 5.19), its LSM list or the machine lacks it. Nothing is
    different then but that."""
    import os
    import sys

    if os.uname().machine not in ("x86_64", "aarch64"):
        return "no Landlock system call numbers for " + os.uname().machine
    had = {m: m in sys.modules for m in ("ctypes", "ctypes._endian")}
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        long_ = ctypes.c_long

        def call(name, nr, *args):
            r = libc.syscall(long_(nr), *args)
            if r < 0:
                raise OSError(ctypes.get_errno(), name + ": " + os.strerror(ctypes.get_errno()))
            return r

        class Ruleset(ctypes.Structure):  # struct landlock_ruleset_attr, ABI 1's size
            _fields_ = [("handled_access_fs", ctypes.c_uint64)]

        class PathBeneath(ctypes.Structure):  # struct landlock_path_beneath_attr
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        refer = 1 << 13  # LANDLOCK_ACCESS_FS_REFER
        abi = call("landlock_create_ruleset", 444, None, long_(0), long_(1))  # LANDLOCK_CREATE_RULESET_VERSION
        if abi < 2:
            return "Landlock ABI %d has no LANDLOCK_ACCESS_FS_REFER" % abi
        attr = Ruleset(refer)
        ruleset = call("landlock_create_ruleset", 444, ctypes.byref(attr), long_(ctypes.sizeof(attr)), long_(0))
        try:
            root = os.open("/", os.O_PATH | os.O_CLOEXEC)
            try:
                rule = PathBeneath(refer, root)
                call("landlock_add_rule", 445, long_(ruleset), long_(1), ctypes.byref(rule), long_(0))  # LANDLOCK_RULE_PATH_BENEATH
            finally:
                os.close(root)
            # Docker's no-new-privileges has set it already; landlock_restrict_self needs it.
            if libc.prctl(38, long_(1), long_(0), long_(0), long_(0)) != 0:  # PR_SET_NO_NEW_PRIVS
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno()))
            call("landlock_restrict_self", 446, long_(ruleset), long_(0))
        finally:
            os.close(ruleset)
        return abi
    except OSError as e:
        return str(e)
    except Exception as e:  # never keep the runner from starting
        return repr(e)
    finally:
        for m, there in had.items():
            if not there:
                sys.modules.pop(m, None)


def _t1flow_guard():
    import os
    import sys

    fd_name = os.environ.pop("T1FLOW_CHANNEL_FD", None)
    if not fd_name:
        return
    try:
        inherited = int(fd_name)
        import stat

        # A socket from the relay (sandbox.ToolchainRelay); a pipe where
        # something runs the guard without it.
        mode = os.fstat(inherited).st_mode
        if not (stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode)):
            return
        fd = os.dup(inherited)  # non-inheritable (PEP 446)
        os.close(inherited)
    except (OSError, ValueError):
        return
    confined = _t1flow_confine()
    results = os.environ.get("T1FLOW_RESULTS_DIR", "/logs/verifier").rstrip("/") + "/"
    trusted = tuple(p.rstrip("/") + "/" for p in os.environ.get("T1FLOW_TRUSTED_CODE", "").split(":") if p) + ("<frozen ",)
    runner_mods = ("_pytest", "pytest", "pluggy", "ctrf", "pytest_json_ctrf", "t1flow_", "sitecustomize")
    write, getframe, pid = os.write, sys._getframe, os.getpid()
    fspath, isinstance_, str_, int_, type_, tuple_ = os.fspath, isinstance, str, int, type, tuple
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    from _thread import get_ident

    busy = set()

    def q(s):
        s = str_(s)[:400]
        return '"' + "".join(c if " " <= c <= "~" and c != '"' and c != "\\" else "\\u%04x" % ord(c) for c in s) + '"'

    def emit(line):
        try:
            write(fd, (line + "\n").encode())
        except OSError:
            pass

    stdlib = os.path.dirname(os.__file__) + "/"

    def foreign(depth, through_stdlib):
        """Where the code that caused the event is, if it is not the
        verifier's: the first frame from depth up that is not generated code
        ("<string>", "<frozen ...>") and, with through_stdlib, not the
        standard library either (the agent's module calling json.dump or
        pathlib is still the agent's act; pytest calling them is pytest's)."""
        try:
            f = getframe(depth)
        except ValueError:
            return None
        while f is not None:
            name = f.f_code.co_filename
            if not name.startswith("<") and not (through_stdlib and name.startswith(stdlib)):
                if name.startswith(trusted):
                    return None
                return "%s:%d" % (name, f.f_lineno)
            f = f.f_back
        return None

    def runner_owned(obj):
        """A class of the runner's, or a function whose code is the
        verifier's (the standard library, pytest, the plugins, the tests)."""
        if isinstance_(obj, type_):
            mod = obj.__dict__.get("__module__", "")
            return isinstance_(mod, str_) and mod.startswith(runner_mods)
        code = getattr(obj, "__code__", None)
        return code is not None and code.co_filename.startswith(trusted)

    def path_in_results(p):
        try:
            if isinstance_(p, int_):
                return False
            p = fspath(p)
            if not isinstance_(p, str_):
                p = p.decode("utf-8", "replace")
        except Exception:
            return False
        return (p + "/").startswith(results) or ("/" + p).startswith(results)

    def flag(what, detail, where):
        emit('{"ev":"audit","pid":%d,"what":%s,"detail":%s,"where":%s}' % (pid, q(what), q(detail), q(where)))

    def hook(event, args):
        me = get_ident()
        if me in busy:
            return
        busy.add(me)
        try:
            if event == "open":
                path, mode, flags = args
                if (mode and mode != "r" and mode != "rb" and any(c in mode for c in "wax+")) or (flags or 0) & write_flags:
                    if path_in_results(path):
                        w = foreign(2, True)
                        if w:
                            flag("foreign write to the results", str_(path), w)
            elif event in ("os.rename", "os.replace", "os.link", "os.symlink", "shutil.copyfile", "shutil.move"):
                if any(path_in_results(a) for a in args[:2]):
                    w = foreign(2, True)
                    if w:
                        flag("foreign " + event + " in the results", " -> ".join(str_(a) for a in args[:2]), w)
            elif event in ("os.remove", "os.truncate", "os.rmdir", "os.chmod", "os.utime", "shutil.rmtree"):
                if args and path_in_results(args[0]):
                    w = foreign(2, True)
                    if w:
                        flag("foreign " + event + " in the results", str_(args[0]), w)
            elif event.startswith("ctypes."):
                # Loading a library (the import of ctypes itself loads the
                # interpreter's own symbols, pythonapi) or reading memory by
                # address. A cast of an address and a write through it raise
                # no event: loading ctypes is the act to catch.
                if event in ("ctypes.dlopen", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata", "ctypes.PyObj_FromPtr", "ctypes.cdata/buffer") or (
                    event == "ctypes.dlsym" and isinstance_(args[1], str_) and args[1].lstrip("_").startswith("Py")
                ):
                    w = foreign(2, True)
                    if w:
                        flag("ctypes reaches the interpreter's memory", event + " " + str_(args[:2])[:200], w)
            elif event == "object.__setattr__":
                obj, name = args[0], args[1]
                if runner_owned(obj):
                    w = foreign(2, True)
                    if w:
                        flag("replaces the runner's code", "%s.%s" % (getattr(obj, "__qualname__", type_(obj).__name__), name), w)
            elif event == "object.__delattr__":
                if runner_owned(args[0]):
                    w = foreign(2, True)
                    if w:
                        flag("replaces the runner's code", "del %s.%s" % (getattr(args[0], "__qualname__", "?"), args[1]), w)
            elif event in ("code.__new__", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                           "sys.settrace", "sys.setprofile"):
                w = foreign(2, True)
                if w:
                    flag("reaches into the interpreter", event, w)
            elif event == "sys._getframe":
                w = foreign(2, False)
                if w:
                    flag("reaches into the interpreter", event, w)
            elif event == "compile" and isinstance_(args[1], str_) and args[1].startswith(trusted):
                w = foreign(2, False)
                if w:
                    flag("compiles code under the verifier's name", args[1], w)
            elif event == "object.__getattr__" and args[1] in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
                w = foreign(2, False)
                if w:
                    flag("reaches into the interpreter", "frame through ." + args[1], w)
        except Exception as e:  # never break the runner
            emit('{"ev":"guard-error","pid":%d,"detail":%s}' % (pid, q(repr(e))))
        finally:
            busy.discard(me)

    sys.addaudithook(hook)
    sys.t1flow_channel = fd  # for the t1flow_mark plugin; reading it is not a secret
    if isinstance_(confined, int_):
        emit('{"ev":"guard","pid":%d,"landlock":%d}' % (pid, confined))
    else:
        emit('{"ev":"guard","pid":%d,"landlock":0,"unconfined":%s}' % (pid, q(confined)))


_t1flow_guard()
del _t1flow_guard, _t1flow_confine
