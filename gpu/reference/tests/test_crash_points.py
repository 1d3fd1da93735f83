"""Exactly once under kill -9: the trainer process, started from its CLI, kills
itself (--crash-at, SIGKILL) at each step of a ppo_step's commit; restarted on
the same workdir, the retry of the same key leaves the step trained once."""
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import torch

import commit
import safetensors_io
from helpers import make_engine, make_trainer, rollout, write_batch

TRAINER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "trainer.py")
KEY = "camp/e1/ppo/1"
# From "renamed" on, the new state is in place: the retry replays the result.
COMMITTED_AT = commit.CRASH_POINTS.index("renamed")


class Proc:
    """A trainer process on workdir, started as the Supervisor starts it."""

    def __init__(self, workdir, crash_at=None):
        os.makedirs(workdir, exist_ok=True)
        self.port_file = os.path.join(workdir, f"port.{time.monotonic_ns()}")
        self.stderr_path = self.port_file + ".stderr"
        cmd = [sys.executable, TRAINER, "--workdir", str(workdir), "--device", "cpu", "--threads", "1",
               "--seed", "0", "--port-file", self.port_file]
        if crash_at:
            cmd += ["--crash-at", crash_at]
        with open(self.stderr_path, "w") as err:
            self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.time() + 120
        while not os.path.exists(self.port_file):
            assert self.p.poll() is None, f"trainer exited {self.p.returncode} at start:\n{self.stderr()}"
            assert time.time() < deadline, "trainer did not start in 120 s"
            time.sleep(0.05)
        self.port = int(open(self.port_file).read())

    def stderr(self):
        return open(self.stderr_path).read()

    def post(self, path, body=None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method="POST" if body is not None else "GET",
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=30)


def step(proc, batch_dir):
    return proc.post("/ppo_step", {"key": KEY, "batch_dir": batch_dir, "preset": "small"})


def weights(workdir):
    """The committed actor and critic tensors."""
    out = {}
    for name in ("actor", "critic"):
        tensors, _ = safetensors_io.load(os.path.join(workdir, "state", f"{name}.safetensors"))
        out.update({f"{name}.{k}": v for k, v in tensors.items()})
    return out


def metrics(result):
    return {k: v for k, v in result.items() if k not in ("seconds", "replayed")}


@pytest.fixture(scope="module")
def batch_dir(tmp_path_factory):
    """One short sampled trajectory: its minibatch order needs no randomness,
    so every process that trains it computes the same weights."""
    eng = make_engine(seed=0)
    t = rollout(eng, [257] + list(b"crash"), max_new=8, seed=1)
    return write_batch(tmp_path_factory.mktemp("batch") / "b", [t], [1.0])


@pytest.fixture(scope="module")
def once(tmp_path_factory, batch_dir):
    """The result and weights of training the key once, with no crash."""
    w = tmp_path_factory.mktemp("once") / "w"
    p = Proc(w)
    try:
        res = step(p, batch_dir)
    finally:
        p.stop()
    assert res["version"] == 1 and not res["replayed"]
    return res, weights(w)


@pytest.mark.parametrize("point", commit.CRASH_POINTS)
def test_crash_point_trains_key_exactly_once(tmp_path, batch_dir, once, point):
    want, want_weights = once
    w = tmp_path / "w"
    p = Proc(w, crash_at=point)
    try:
        with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
            step(p, batch_dir)
        assert p.p.wait(timeout=60) == -signal.SIGKILL
        assert f"--crash-at {point}: killing myself" in p.stderr()
    finally:
        p.stop()

    p = Proc(w)   # restarted by the Supervisor on the same workdir
    try:
        got = step(p, batch_dir)
        committed = commit.CRASH_POINTS.index(point) >= COMMITTED_AT
        assert got["replayed"] == committed, f"retry after a crash at {point}: {got}"
        assert got["version"] == 1, f"the key trained twice: {got}"
        assert metrics(got) == metrics(want)
        again = step(p, batch_dir)
        assert again["replayed"] and metrics(again) == metrics(want)
        assert p.post("/health")["version"] == 1
    finally:
        p.stop()
    have = weights(w)
    assert have.keys() == want_weights.keys()
    for k, v in want_weights.items():
        assert torch.equal(have[k], v), f"{k} differs from one training of the key"
    log = open(os.path.join(w, "ops.log")).read()
    assert log.count(f"commit ppo_step {KEY} ") == 1, log
    assert log.count(f"begin ppo_step {KEY}") == (1 if committed else 2), log


def test_records_of_earlier_trainers_still_replay(tmp_path, batch_dir):
    """A state committed before records moved into it (no state/op.json): the
    key's record in ops/ is still its result."""
    req = {"key": KEY, "batch_dir": batch_dir, "preset": "small"}
    tr = make_trainer(tmp_path / "w")
    first = tr._run("ppo_step", req, tr.ppo_step)
    os.remove(os.path.join(tmp_path, "w", "state", "op.json"))
    tr = make_trainer(tmp_path / "w")
    again = tr._run("ppo_step", req, tr.ppo_step)
    assert again["replayed"] and metrics(again) == metrics(first) and tr.version == 1


def test_record_lost_after_the_commit_is_in_the_committed_state(tmp_path, batch_dir, monkeypatch):
    """The ops/ record failed to write after the commit point: the committed
    state's own record answers the retry, and outlives the next commit."""
    req = {"key": KEY, "batch_dir": batch_dir, "preset": "small"}
    tr = make_trainer(tmp_path / "w")

    def lost(rec):
        raise OSError("no space left on device")
    monkeypatch.setattr(tr.store, "finish", lost)
    with pytest.raises(OSError):
        tr._run("ppo_step", req, tr.ppo_step)
    monkeypatch.undo()
    assert not os.listdir(os.path.join(tmp_path, "w", "ops"))
    again = tr._run("ppo_step", req, tr.ppo_step)
    assert again["replayed"] and again["version"] == 1
    tr._run("ppo_step", dict(req, key=KEY + "b"), tr.ppo_step)
    assert tr.version == 2 and tr.store.committed_op()["key"] == KEY + "b"
    assert tr._run("ppo_step", req, tr.ppo_step)["version"] == 1
