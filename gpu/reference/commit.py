"""The trainer's committed state on disk and its idempotency records
(docs/trainer-protocol.md, "Idempotency").

workdir/state/ holds the whole training state (weights, optimiser, version). A
commit writes the next one to state.new/ and swaps it in with two renames;
state.old/ is the one being replaced. workdir/ops/<hash(key)>.json holds the
result of each committed training operation.

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

# The steps of a training operation's commit, in order: after training, after
# writing the new weights to state.new/, after writing all of state.new/, between
# the two renames, after them, after removing state.old/, after writing the
# record's temporary file, after the record, after the ops.log commit line.
CRASH_POINTS = ("trained", "staged-weights", "staged", "between-renames", "renamed", "committed",
                "record-tmp", "recorded", "logged")


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


class Store:
    def __init__(self, workdir, crash_at=None):
        if crash_at is not None and crash_at not in CRASH_POINTS:
            raise ValueError(f"crash point {crash_at!r} is none of {CRASH_POINTS}")
        self.crash_at = crash_at
        self.workdir = workdir
        self.state_dir = os.path.join(workdir, "state")
        self.ops_dir = os.path.join(workdir, "ops")
        os.makedirs(self.ops_dir, exist_ok=True)
        self._recover_state_dirs()

    def crash(self, point):
        """Tests only: die here if told to (crash_at)."""
        if self.crash_at == point:
            print(f"trainer: --crash-at {point}: killing myself", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def has_state(self):
        return os.path.exists(os.path.join(self.state_dir, "state.json"))

    def _recover_state_dirs(self):
        new, old = self.state_dir + ".new", self.state_dir + ".old"
        if not os.path.exists(self.state_dir) and os.path.exists(old):
            os.replace(old, self.state_dir)   # crashed between the two renames
        shutil.rmtree(new, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)

    def commit(self, write, op=False):
        """write(dir, crash) writes the whole training state into dir
        (state.new/), which is then swapped in. op: a training operation's
        commit (the only one with crash points)."""
        crash = self.crash if op else (lambda _: None)
        new, old = self.state_dir + ".new", self.state_dir + ".old"
        shutil.rmtree(new, ignore_errors=True)
        os.makedirs(new)
        write(new, crash)
        fsync_dir(new)
        crash("staged")
        if os.path.exists(self.state_dir):
            os.replace(self.state_dir, old)
        crash("between-renames")
        os.replace(new, self.state_dir)
        crash("renamed")
        shutil.rmtree(old, ignore_errors=True)

    # ---- idempotency records -------------------------------------------------
    def record_path(self, key):
        return os.path.join(self.ops_dir, hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def lookup(self, key):
        """The record of a committed operation ({"op", "key", "result"}), or None."""
        rec = self.record_path(key)
        if not os.path.exists(rec):
            return None
        with open(rec) as f:
            return json.load(f)

    def record(self, op, key, result):
        write_json(self.record_path(key), {"op": op, "key": key, "result": result}, lambda: self.crash("record-tmp"))
