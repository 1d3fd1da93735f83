"""A crash mid-SFT or mid-critic-fit loses at most the epoch in flight: the
trainer, started from its CLI with --crash-at <op>-epoch, kills itself
(SIGKILL) right after saving its first finished epoch; restarted on the same
workdir, the retry of the key goes on from epoch 2 and ends with the very
result and weights, bit for bit, of an operation that never crashed."""
import http.client
import os
import signal
import urllib.error

import pytest
import torch

from helpers import make_engine, make_trainer, rollout, write_batch
from test_crash_points import Proc, metrics, weights

KEY = "camp/e1/sft/0"
EPOCHS = 3


@pytest.fixture(scope="module")
def sft_batch(tmp_path_factory):
    """Three trajectories in minibatches of one: each epoch's order matters."""
    eng = make_engine(seed=0)
    ts = [rollout(eng, [257] + list(f"sft {i}".encode()), max_new=8, seed=i) for i in range(3)]
    return write_batch(tmp_path_factory.mktemp("sftbatch") / "b", ts, [1.0, 1.0, 1.0])


def run(proc, op, batch_dir, schedule="constant"):
    return proc.post("/" + op, {"key": KEY, "batch_dir": batch_dir, "preset": "small",
                                "hyper": {"epochs": EPOCHS, "minibatches": 3, "lr_schedule": schedule}})


# Under the cosine schedule a resumed epoch must start from the request's
# learning rate, not the decayed one its saved optimizer state holds.
@pytest.mark.parametrize("op,schedule", [("sft", "constant"), ("critic_fit", "constant"), ("sft", "cosine")])
def test_resumes_from_its_last_epoch(tmp_path, sft_batch, op, schedule):
    once = tmp_path / "once"
    p = Proc(once)
    try:
        want = run(p, op, sft_batch, schedule)
    finally:
        p.stop()

    w = tmp_path / "w"
    p = Proc(w, crash_at=f"{op}-epoch")
    try:
        with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
            run(p, op, sft_batch, schedule)
        assert p.p.wait(timeout=60) == -signal.SIGKILL
    finally:
        p.stop()
    p = Proc(w)
    try:
        got = run(p, op, sft_batch, schedule)
    finally:
        p.stop()
    log = open(os.path.join(w, "ops.log")).read()
    assert log.count(f"{op} {KEY} epoch 1/{EPOCHS} saved") == 1, f"epoch 1 ran again:\n{log}"
    assert f"resume {op} {KEY} after epoch 1/{EPOCHS}" in log, log
    assert log.count(f"begin {op} {KEY}") == 2 and log.count(f"commit {op} {KEY} ") == 1, log
    assert not got["replayed"] and metrics(got) == metrics(want)
    have, ref = weights(w), weights(once)
    for k, v in ref.items():
        assert torch.equal(have[k], v), f"{k} differs from an {op} that never crashed"
    assert not os.listdir(os.path.join(w, "progress")), "the commit left the key's progress behind"


def test_sft_progress_of_another_request_is_not_used(tmp_path, sft_batch):
    """Progress saved for one request of the key does not apply to another
    (another batch, other hyperparameters): that one trains from zero."""
    tr = make_trainer(tmp_path / "w")
    req = {"key": KEY, "batch_dir": sft_batch, "preset": "small", "hyper": {"epochs": EPOCHS, "minibatches": 3}}

    def crash(point):
        if point == "sft-epoch":
            raise KeyboardInterrupt("simulated crash after epoch 1")
    tr.store.crash = crash
    with pytest.raises(KeyboardInterrupt):
        tr._run("sft", req, tr.sft)
    tr = make_trainer(tmp_path / "w")
    other = dict(req, hyper={"epochs": EPOCHS, "minibatches": 3, "actor_lr": 1e-5})
    tr._run("sft", other, tr.sft)
    log = open(os.path.join(tmp_path, "w", "ops.log")).read()
    assert "resume sft" not in log and log.count(f"sft {KEY} epoch 1/{EPOCHS} saved") == 2, log


def test_cosine_schedule_ends_near_zero_and_changes_the_weights(tmp_path, sft_batch):
    """lr_schedule = cosine: the last step's learning rate is the schedule's
    (near 0), the weights differ from a constant rate's, and an unknown
    schedule is refused naming the field."""
    import ppo
    got = {}
    for schedule in ("constant", "cosine"):
        tr = make_trainer(tmp_path / schedule)
        lrs = []   # the rates SFT set, in order (its optimizer is replaced by a fresh one at the end)
        set_lr = tr._set_lr
        tr._set_lr = lambda opt, lr: (lrs.append(lr), set_lr(opt, lr))[1]
        tr._run("sft", {"key": KEY, "batch_dir": sft_batch, "preset": "small",
                        "hyper": {"epochs": EPOCHS, "minibatches": 3, "actor_lr": 1e-3, "lr_schedule": schedule}}, tr.sft)
        got[schedule] = (lrs[-1], {k: v.clone() for k, v in tr.actor.state_dict().items()})
    total = EPOCHS * 3
    assert got["constant"][0] == 1e-3
    assert got["cosine"][0] == pytest.approx(ppo.scheduled_lr(1e-3, "cosine", total - 1, total)) and got["cosine"][0] < 1e-4
    assert any(not torch.equal(v, got["constant"][1][k]) for k, v in got["cosine"][1].items())
    with pytest.raises(ValueError, match="hyper.lr_schedule = 'linear' must be one of constant, cosine"):
        ppo.Hyper.from_dict({"lr_schedule": "linear"}, "small")
