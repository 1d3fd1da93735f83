"""The trainer's committed state on disk and its idempotency records
(docs/trainer-protocol.md, "Idempotency").

workdir/state/ holds the whole training state: weights, optimiser, version and,
when a training operation made it, that operation's record (op.json: op, key,
result). A commit writes the next state, record included, to state.new/ and
swaps it in with two renames (state.old/ is the one being replaced), so the
weights and the record of the key that produced them are committed together:
the rename of state.new/ to state/ is the commit point.

workdir/ops/<hash(key)>.json keeps every committed operation's record once
later commits have replaced state/: it is written after the commit and, after a
crash, on restart from state/op.json (roll forward), before any request.
Records written there by earlier versions of the trainer are read the same way.
workdir/ops.log is the audit trail: one `commit <op> <key> version=N` line per
key, also rolled forward on restart.

Tests only: a Store made with crash_at=POINT kills its own process (SIGKILL,
as kill -9 would) when a training operation reaches that step of its commit
(trainer.py --crash-at). Never set outside tests.
"""
import hashlib
import json
import os
import shutil
import signal
import sys
import time

# The steps of a training operation's commit, in order: after training, after
# writing the new weights to state.new/, after writing all of state.new/ (record
# included), between the two renames, after them (committed), after removing
# state.old/, after writing ops/'s temporary file, after the ops/ record, after
# the ops.log commit line (the reply not sent).
CRASH_POINTS = ("trained", "staged-weights", "staged", "between-renames", "renamed", "committed",
                "record-tmp", "recorded", "logged")
# Not commit steps: after SFT or a critic fit saved its first finished epoch (epochs.py).
PROGRESS_CRASH_POINTS = ("sft-epoch", "critic_fit-epoch")


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(d):
    """Every file under d, then d itself, on disk."""
    for name in os.listdir(d):
        fd = os.open(os.path.join(d, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(d)


def write_json(path, obj, before_rename=None):
    """Write obj to path through a temporary file and a rename, synced."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    if before_rename:
        before_rename()
    os.replace(tmp, path)


def commit_line(rec):
    return f"commit {rec['op']} {rec['key']} version={rec['result']['version']}"


class Store:
    def __init__(self, workdir, crash_at=None):
        if crash_at is not None and crash_at not in CRASH_POINTS + PROGRESS_CRASH_POINTS:
            raise ValueError(f"crash point {crash_at!r} is none of {CRASH_POINTS + PROGRESS_CRASH_POINTS}")
        self.crash_at = crash_at
        self.workdir = workdir
        self.state_dir = os.path.join(workdir, "state")
        self.ops_dir = os.path.join(workdir, "ops")
        self.log_path = os.path.join(workdir, "ops.log")
        os.makedirs(self.ops_dir, exist_ok=True)
        self._recover_state_dirs()
        self._roll_forward()

    def crash(self, point):
        """Tests only: die here if told to (crash_at)."""
        if self.crash_at == point:
            print(f"trainer: --crash-at {point}: killing myself", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def log(self, line):
        with open(self.log_path, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
            f.flush()
            os.fsync(f.fileno())

    def has_state(self):
        return os.path.exists(os.path.join(self.state_dir, "state.json"))

    # ---- the state directory -------------------------------------------------
    def _recover_state_dirs(self):
        new, old = self.state_dir + ".new", self.state_dir + ".old"
        if not os.path.exists(self.state_dir) and os.path.exists(old):
            # Crashed between the two renames: state.new/ was not committed
            # (its operation trains again); state.old/ is the last commit.
            os.replace(old, self.state_dir)
        shutil.rmtree(new, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)

    def commit(self, write, rec=None):
        """write(dir, crash) writes the whole training state into dir
        (state.new/); rec, the record of the training operation that made it,
        goes in with it as op.json; then state.new/ is swapped in. Crash points
        only in a training operation's commit."""
        crash = self.crash if rec is not None else (lambda _: None)
        self._ensure_recorded()   # the record state/op.json holds outlives this commit
        new, old = self.state_dir + ".new", self.state_dir + ".old"
        shutil.rmtree(new, ignore_errors=True)
        os.makedirs(new)
        write(new, crash)
        if rec is not None:
            write_json(os.path.join(new, "op.json"), rec)
        fsync_tree(new)
        crash("staged")
        if os.path.exists(self.state_dir):
            os.replace(self.state_dir, old)
        crash("between-renames")
        os.replace(new, self.state_dir)   # the commit point
        fsync_dir(self.workdir)
        crash("renamed")
        shutil.rmtree(old, ignore_errors=True)

    def committed_op(self):
        """The record of the operation that made the committed state, or None
        (a fresh, loaded or older trainer's state)."""
        try:
            with open(os.path.join(self.state_dir, "op.json")) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    # ---- idempotency records -------------------------------------------------
    def record_path(self, key):
        return os.path.join(self.ops_dir, hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def lookup(self, key):
        """The record of a committed operation ({"op", "key", "result"}), or None."""
        try:
            with open(self.record_path(key)) as f:
                return json.load(f)
        except FileNotFoundError:
            pass
        rec = self.committed_op()
        return rec if rec is not None and rec["key"] == key else None

    def finish(self, rec):
        """After the commit: the operation's record in ops/, then its ops.log line."""
        write_json(self.record_path(rec["key"]), rec, lambda: self.crash("record-tmp"))
        self.crash("recorded")
        self.log(commit_line(rec))
        self.crash("logged")

    def _ensure_recorded(self):
        rec = self.committed_op()
        if rec is not None and not os.path.exists(self.record_path(rec["key"])):
            write_json(self.record_path(rec["key"]), rec)
        return rec

    def _roll_forward(self):
        """On restart: finish what a crash after the commit point left undone."""
        rec = self._ensure_recorded()
        if rec is None:
            return
        line = commit_line(rec)
        try:
            with open(self.log_path) as f:
                logged = any(l.rstrip("\n").split(" ", 1)[-1] in (line, line + " (rolled forward)") for l in f)
        except FileNotFoundError:
            logged = False
        if not logged:
            self.log(line + " (rolled forward)")
