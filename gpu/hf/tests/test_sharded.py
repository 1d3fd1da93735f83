"""The hf trainer as 2 ranks under torchrun on CPU (gloo), over HTTP as the
supervisor runs it (gpu/hf/sharded.py): an SFT and a PPO step give the one-rank
trainer's losses and weights; rank 1 killed mid-step leaves the key untrained,
and the restarted group trains it once, from the distributed checkpoint, to
exactly the weights of the run that never crashed.

device_check.sh runs it with T1FLOW_HF_TEST_DEVICE=cuda T1FLOW_HF_TEST_RANKS=1
(FSDP2 in bf16 with fp32 reduction): the one-rank comparison is then skipped
(bf16 against float32) and the resumed weights are compared within bf16's
tolerance (CUDA's index_add is not bitwise deterministic)."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

import sharded
from helpers import batch, make_trainer, op, rollouts
from test_cli import DEVICE, HF, call, free_port, wait_healthy

RANKS = int(os.environ.get("T1FLOW_HF_TEST_RANKS", "2"))
# 3 trajectories: minibatches of 2 and 1 (rank 1's slice of the second is a
# dropped repeat); sft's 2 epochs save the first (ShardedProgress). The PPO
# step's four minibatches measured approx_kl 0, 0.013, 0.29, 0.05 on one rank:
# target_kl 0.1 stops the actor at the third, so the ranks must agree on it.
# The update then left a positive-advantage token 0.70 of its probability
# (0.88 at half the step): min_pos_ratio 0.8 backtracks it once, on every
# rank's shards alike.
HYPER = {"preset": "small", "hyper": {"update_epochs": 2, "minibatches": 2, "epochs": 2, "target_kl": 0.1,
                                      "min_pos_ratio": 0.8}}


def torchrun(model, work, log, *extra):
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={RANKS}",
           os.path.join(HF, "trainer.py"), "--port", str(port), "--workdir", str(work), "--device", DEVICE,
           "--init", model, "--threads", "1"] + list(extra)
    p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, p, log, timeout=300)
    except BaseException:
        stop(p)
        raise
    return p, url


def ranks_of(pid):
    """The child processes of pid (torchrun's ranks)."""
    kids = []
    for q in os.listdir("/proc"):
        try:
            with open(f"/proc/{q}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(q))
        except (OSError, ValueError, IndexError):
            pass
    return kids


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop(p):
    """SIGKILL torchrun's process group, as the supervisor does; its ranks
    (each in a session of its own) must die with it (sharded.die_with_torchrun)."""
    ranks = ranks_of(p.pid)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.time() + 20
    while any(alive(r) for r in ranks) and time.time() < deadline:
        time.sleep(0.2)
    left = [r for r in ranks if alive(r)]
    for r in left:
        os.kill(r, signal.SIGKILL)
    assert not left, f"ranks {left} outlived torchrun's SIGKILL"


def weights(d):
    """Every tensor of a saved checkpoint: {"model": ..., "critic": ...}."""
    out = {"model": {}, "critic": {}}
    for name in os.listdir(d):
        for kind in out:
            if name.startswith(kind) and name.endswith(".safetensors"):
                out[kind].update(load_file(os.path.join(d, name)))
    return out


def commits(work):
    with open(os.path.join(work, "ops.log")) as f:
        return [l.split(" ", 1)[1].split(" version=")[0] for l in f if " commit " in l]


@pytest.fixture(scope="module")
def sampled(engines, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sharded-batch")
    return batch(tmp, "b", rollouts(engines("qwen3_moe"), n=3, max_new=8, turns=2, temperature=0.9), rewards=[1.0, 0.0, 0.5])


@pytest.fixture(scope="module")
def uncrashed(tiny, sampled, tmp_path_factory):
    """2 ranks: sft, ppo_step, save. The workdir after the sft commit is copied
    aside (the trainer idle: what a crash right after the reply leaves)."""
    tmp = tmp_path_factory.mktemp("sharded")
    work = tmp / "w"
    p, url = torchrun(tiny("qwen3_moe"), work, str(tmp / "uncrashed.log"))
    try:
        assert call(url, "/health")[1]["world_size"] == RANKS
        s, sft = call(url, "/sft", dict(key="c/sft/0", batch_dir=sampled, **HYPER))
        assert s == 200, sft
        shutil.copytree(work, tmp / "after-sft")
        s, ppo = call(url, "/ppo_step", dict(key="c/ppo/0", batch_dir=sampled, **HYPER))
        assert s == 200, ppo
        s, again = call(url, "/sft", dict(key="c/sft/0", batch_dir=sampled, **HYPER))
        assert s == 200 and again["replayed"] is True and again["version"] == 1
        assert call(url, "/save", {"dir": str(tmp / "saved")})[0] == 200
    finally:
        stop(p)
    return {"tmp": tmp, "sft": sft, "ppo": ppo, "saved": str(tmp / "saved"), "work": work}


@pytest.mark.skipif(DEVICE != "cpu", reason="the one-rank trainer runs on CPU in float32")
def test_two_ranks_train_as_one_rank(tiny, sampled, uncrashed, tmp_path):
    tr = make_trainer(tmp_path / "w", tiny("qwen3_moe"))
    one = {}
    for name, key in (("sft", "c/sft/0"), ("ppo_step", "c/ppo/0")):
        torch.manual_seed(sharded.op_seed(key))   # as every rank does (the minibatch order)
        one[name] = op(tr, name, key, sampled, **HYPER)
    two = {"sft": uncrashed["sft"], "ppo_step": uncrashed["ppo"]}
    assert one["sft"]["actor_optimizer"] == two["sft"]["actor_optimizer"] == "fresh"
    for r in (one["ppo_step"], two["ppo_step"]):
        assert (r["actor_updates"], r["kl_stop_minibatch"]) == (2, 3), r
        assert (r["actor_backtracks"], r["actor_step_share"]) == (1, 0.5), r
    for name, metrics in (("sft", ("loss", "loss_first", "tokens")),
                          ("ppo_step", ("policy_loss", "value_loss", "entropy", "approx_kl", "explained_variance",
                                        "logprob_gap_replay", "logprob_gap_noreplay", "tokens", "value_clipped",
                                        "value_range", "advantage_mean", "post_kl", "pos_ratio_min"))):
        for m in metrics:
            assert two[name][m] == pytest.approx(one[name][m], rel=1e-4, abs=1e-6), (name, m)
    got = weights(uncrashed["saved"])
    for kind, model in (("model", tr.actor), ("critic", tr.critic)):
        want = model.state_dict()
        assert set(got[kind]) == set(want), kind
        # atol 1e-4, a third of one Adam step at the preset's actor lr (3e-4):
        # Adam divides each gradient element by its own scale, so the summation
        # order of a near-zero gradient (the router's; measured 5e-5 on
        # transformers 5 under FSDP2) can move a weight by a fraction of a
        # step. A rank's slice trained twice or not at all moves it by steps.
        off = {k: (got[kind][k] - v.detach()).abs().max().item() for k, v in want.items()
               if not torch.allclose(got[kind][k], v.detach(), rtol=1e-4, atol=1e-4)}
        assert not off, (kind, off)
    moved = got["model"]["model.embed_tokens.weight"] - load_file(os.path.join(tiny("qwen3_moe"), "model.safetensors"))["model.embed_tokens.weight"]
    assert moved.abs().max() > 1e-4, "the two ranks trained"


def test_rank_killed_mid_step_trains_the_key_once_and_resumes_to_the_same_bits(tiny, sampled, uncrashed):
    tmp = uncrashed["tmp"]
    work = tmp / "after-sft"   # committed: sft c/sft/0 (version 1)
    p, url = torchrun(tiny("qwen3_moe"), work, str(tmp / "crash.log"), "--crash-at", "trained", "--crash-rank", str(RANKS - 1))
    try:
        try:
            status, _ = call(url, "/ppo_step", dict(key="c/ppo/0", batch_dir=sampled, **HYPER))
            assert status != 200
        except OSError:
            pass   # the group went down under the request
        assert p.wait(timeout=120) != 0, "rank 1's death ends the group"
    finally:
        stop(p)
    assert commits(work) == ["commit sft c/sft/0"], "the killed step did not commit"
    p, url = torchrun(tiny("qwen3_moe"), work, str(tmp / "resume.log"))
    try:
        assert call(url, "/health")[1]["version"] == 1, "the last commit is back, from state/dcp/"
        s, r = call(url, "/ppo_step", dict(key="c/ppo/0", batch_dir=sampled, **HYPER))
        assert s == 200 and r["replayed"] is False and r["version"] == 2
        assert call(url, "/ppo_step", dict(key="c/ppo/0", batch_dir=sampled, **HYPER))[1]["replayed"] is True
        assert call(url, "/save", {"dir": str(tmp / "resumed")})[0] == 200
    finally:
        stop(p)
    assert commits(work) == ["commit sft c/sft/0", "commit ppo_step c/ppo/0"]
    got, want = weights(str(tmp / "resumed")), weights(uncrashed["saved"])
    if DEVICE != "cpu":
        for k in ("policy_loss", "value_loss"):
            assert r[k] == pytest.approx(uncrashed["ppo"][k], rel=5e-2, abs=1e-3), k
        for kind in ("model", "critic"):
            for k in want[kind]:
                torch.testing.assert_close(got[kind][k], want[kind][k], rtol=1e-2, atol=1e-3, msg=f"{kind} {k}")
        return
    assert {k: r[k] for k in ("policy_loss", "value_loss", "approx_kl")} == \
        {k: uncrashed["ppo"][k] for k in ("policy_loss", "value_loss", "approx_kl")}
    for kind in ("model", "critic"):
        assert set(got[kind]) == set(want[kind])
        for k in want[kind]:
            assert torch.equal(got[kind][k], want[kind][k]), f"{kind} {k} differs from the uncrashed run"


def test_a_state_saved_before_the_value_range_loads_as_not_fitted(tiny, tmp_path):
    """DCP states written before the critic had its value range (one
    process here: DCP needs no process group) load with the range empty
    (not fitted yet) where optional_absent names it, as ShardedTrainer's
    state and ShardedProgress's saved epochs do; without it, DCP refuses
    the missing key."""
    import torch.distributed.checkpoint as dcp
    import model as M   # gpu/reference

    tr = make_trainer(tmp_path / "w", tiny("qwen3_moe"))
    old = tr._critic_from(None)
    M.widen_range(old.value_range, torch.tensor([0.0, 1.0]))
    del old._buffers[M.VALUE_RANGE]   # as a critic made before the range
    path = str(tmp_path / "dcp")
    dcp.save({"critic": sharded.Weights(old, torch.optim.Adam(old.parameters()))}, checkpoint_id=path)
    fresh = tr._critic_from(None)
    absent = sharded.optional_absent(path, "critic", fresh)
    assert absent == (M.VALUE_RANGE,)
    opt = torch.optim.Adam(fresh.parameters())
    dcp.load({"critic": sharded.Weights(fresh, opt, sharded.saved_layout(path, "critic"), absent)}, checkpoint_id=path)
    assert torch.equal(fresh.value_head.weight, old.value_head.weight)
    assert fresh.value_range[0] > fresh.value_range[1], "the range the state lacks stays empty: not fitted yet"
    with pytest.raises(BaseException, match="Missing key in checkpoint state_dict: critic.model.value_range"):   # without the allowance
        dcp.load({"critic": sharded.Weights(tr._critic_from(None), opt, sharded.saved_layout(path, "critic"))},
                 checkpoint_id=path)
