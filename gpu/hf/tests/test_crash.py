"""The HF trainer killed between the two renames of a commit (state/ gone,
state.old/ the last commit, state.new/ the uncommitted HF checkpoint):
restarted, it resumes the last commit (an HF checkpoint directory) and the
retried key trains once."""
import os
import subprocess
import sys

import numpy as np

import testkit
from helpers import make_trainer, op
from test_cli import HF, call, free_port, wait_healthy


def start(model, work, tmp, name, *extra):
    port = free_port()
    log = str(tmp / f"{name}.log")
    cmd = [sys.executable, os.path.join(HF, "trainer.py"), "--port", str(port), "--workdir", str(work),
           "--device", "cpu", "--init", model, "--threads", "1"] + list(extra)
    p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, p, log)
    return p, url


def test_killed_between_renames_trains_the_key_once(tiny, tmp_path):
    model, work = tiny("qwen3_moe"), tmp_path / "w"
    toks = list(range(3, 40))
    bd = testkit.write_batch(str(tmp_path / "b"), [{"tokens": toks, "loss_mask": [0] * 10 + [1] * 27,
                                                    "logprobs": [0.0] * len(toks), "routed_experts": np.zeros((len(toks), 3, 2))}])
    # A committed step first (in-process), so the last commit is not the init.
    done = op(make_trainer(work, model), "sft", "c/sft/0", bd, preset="small")
    assert done["version"] == 1
    p, url = start(model, work, tmp_path, "crash", "--crash-at", "between-renames")
    try:
        try:
            call(url, "/sft", {"key": "c/sft/1", "batch_dir": bd, "preset": "small"})
        except OSError:
            pass   # the connection dies with the process
        assert p.wait(timeout=60) != 0
        assert not os.path.exists(work / "state") and os.path.exists(work / "state.old")
    finally:
        p.kill()
    p, url = start(model, work, tmp_path, "restart")
    try:
        assert call(url, "/health")[1]["version"] == 1, "the last commit is back"
        status, r = call(url, "/sft", {"key": "c/sft/1", "batch_dir": bd, "preset": "small"})
        assert status == 200 and r["replayed"] is False and r["version"] == 2
        assert call(url, "/sft", {"key": "c/sft/1", "batch_dir": bd, "preset": "small"})[1]["replayed"] is True
        assert call(url, "/sft", {"key": "c/sft/0", "batch_dir": bd, "preset": "small"})[1] == dict(done, replayed=True)
        with open(work / "ops.log") as f:
            log = f.read()
        assert log.count(" commit sft c/sft/0 ") == 1 and log.count(" commit sft c/sft/1 ") == 1
        assert os.path.exists(work / "state" / "model.safetensors") and not os.path.exists(work / "state.new")
    finally:
        p.kill()
        p.wait()
