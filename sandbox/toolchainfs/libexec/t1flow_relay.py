"""The sealed verifier's channel relay (sandbox.ToolchainRunCmd):
python3 -I -S t1flow_relay.py COMMAND...

It is started as root, before test.sh's user is taken on, holding
descriptor 61: the pipe to the host (the docker exec's standard output), the
runner's report channel. It makes itself non-dumpable first, so no process
without CAP_SYS_PTRACE (none in a sandbox has it) can open its descriptors
or read its memory through /proc; then it runs COMMAND (setpriv, env,
timeout, bash test.sh) with descriptor 61 one end of a socket pair whose
other end only the relay holds, and copies what arrives there to the host,
unchanged. What test.sh and the pytest it starts hold is therefore a socket:
opening /proc/<pid>/fd/61 of any of them fails (ENXIO, a socket cannot be
reopened by path), the pair has no address to connect to, and the pipe that
reaches the host is held by no process the agent's code can open. The
relay ends with COMMAND's exit status (128 + the signal that killed it),
once COMMAND has ended and what its processes wrote is passed on.

-S: no site, so no sitecustomize (nothing to seal: the relay imports only
the standard library's built-in and compiled modules it names).
"""
import ctypes
import os
import select
import signal
import socket
import sys

CHANNEL = 61  # sandbox.ToolchainChannelFD


def fail(why):
    os.write(2, ("t1flow: the verifier's channel relay: %s: tests/test.sh did not run\n" % why).encode())
    os._exit(1)


def send(out, data):
    """Writes data to the host; once the host is gone, drops it."""
    while out is not None and data:
        try:
            data = data[os.write(out, data):]
        except OSError:
            return None
    return out


def main(argv):
    if not argv:
        fail("no command")
    # PR_SET_DUMPABLE 0, before anything else runs beside it.
    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
        fail("prctl(PR_SET_DUMPABLE, 0): " + os.strerror(ctypes.get_errno()))
    try:
        os.set_inheritable(CHANNEL, False)
    except OSError as e:
        fail("descriptor %d: %s" % (CHANNEL, e.strerror))
    out = CHANNEL
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    mine.shutdown(socket.SHUT_WR)  # the relay never writes to test.sh
    mine.setblocking(False)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # The environment the relay was given, without the LC_CTYPE Python adds
    # when it coerces the C locale (PEP 538).
    env = {k: v for k, v in os.environ.items() if k != "LC_CTYPE"}
    try:
        # Found on PATH, as bash's exec finds it. Python ignores SIGPIPE and
        # SIGXFSZ; test.sh gets the defaults, as it did when bash exec'd it.
        pid = os.posix_spawnp(argv[0], argv, env,
                             file_actions=[(os.POSIX_SPAWN_DUP2, theirs.fileno(), CHANNEL)],
                             setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD))
    except OSError as e:
        fail("%s: %s" % (argv[0], e.strerror))
    theirs.close()
    poll = select.poll()
    poll.register(mine, select.POLLIN)
    poll.register(wake_r, select.POLLIN)
    status = None
    while status is None:
        for fd, _ in poll.poll():
            if fd == wake_r:
                os.read(wake_r, 512)
        if mine is not None:
            out, mine = pump(mine, out, poll)
        wpid, st = os.waitpid(pid, os.WNOHANG)
        if wpid:
            status = os.waitstatus_to_exitcode(st)
    if mine is not None:  # what COMMAND's processes wrote before it ended
        pump(mine, out, poll)
    os._exit(status if status >= 0 else 128 - status)


def pump(mine, out, poll):
    """Passes on what is waiting on the relay's end; returns the host's
    descriptor (None once the host is gone) and the relay's end (None once
    every holder of the other end closed it)."""
    while True:
        try:
            data = mine.recv(1 << 16)
        except BlockingIOError:
            return out, mine
        if not data:
            poll.unregister(mine)
            mine.close()
            return out, None
        out = send(out, data)


main(sys.argv[1:])
