"""The critic's value range: its values, where they stand in for a return
(the advantage's baseline, the explained variance), are clipped to the least
and greatest return it has been fitted on. A linear value head extrapolates
on an answer unlike any it was fitted on (a garbled answer of return 0 was
valued at -1.40 and 1.90 on the demo), and below the least return R - V
rewards an answer that earned nothing (docs/learning.md)."""
import os

import pytest
import torch

import batch as B
import model as M
import ppo
import safetensors_io
from helpers import make_engine, make_trainer, rollout, write_batch

FIT = {"preset": "small", "hyper": {"epochs": 1}}


def test_clip_to_range_is_a_no_op_until_fitted():
    r = M.empty_range()
    v = torch.tensor([-3.0, 0.5, 4.0])
    assert torch.equal(M.clip_to_range(v, r), v) and torch.equal(M.clip_to_range(v, None), v)
    M.widen_range(r, torch.tensor([0.25, 0.75]))
    M.widen_range(r, torch.tensor([]))           # nothing fitted: unchanged
    assert r.tolist() == [0.25, 0.75]
    M.widen_range(r, torch.tensor([0.5, 1.5]))   # a union: the least and greatest ever fitted
    assert r.tolist() == [0.25, 1.5]
    assert M.clip_to_range(v, r).tolist() == [0.25, 0.5, 1.5]


def prompts(n):
    return [[257] + list(b"t%d" % i) for i in range(n)]


def test_a_fit_sets_the_range_and_a_checkpoint_keeps_it(tmp_path):
    eng = make_engine(seed=0)
    trajs = [rollout(eng, p, max_new=12, seed=i) for i, p in enumerate(prompts(4))]
    d = write_batch(tmp_path / "b", trajs, [0.25, 0.5, 0.75, 0.5])
    torch.manual_seed(0)
    tr = make_trainer(tmp_path / "w", seed=0)
    assert tr._range_out() is None
    res = tr._run("critic_fit", {"key": "c/1", "batch_dir": d, **FIT}, tr.critic_fit)
    assert res["value_range"] == [0.25, 0.75] and res["value_clipped_before"] == 0.0
    wider = write_batch(tmp_path / "b2", trajs, [0.0, 0.5, 1.25, 0.5])
    res = tr._run("critic_fit", {"key": "c/2", "batch_dir": wider, **FIT}, tr.critic_fit)
    assert res["value_range"] == [0.0, 1.25]
    ck = tmp_path / "ck"
    tr.save({"dir": str(ck)})
    other = make_trainer(tmp_path / "w2", seed=1)
    other.load({"dir": str(ck)})
    assert other._range_out() == res["value_range"]
    # The committed state keeps it too: a restarted trainer reads its state/.
    assert make_trainer(tmp_path / "w", seed=0)._range_out() == res["value_range"]
    # A critic saved before the range existed loads as one not fitted yet: its values unclipped.
    path = os.path.join(ck, "critic.safetensors")
    state, meta = safetensors_io.load(path)
    del state[M.VALUE_RANGE]
    safetensors_io.save(path, state, meta)
    old, _ = M.load_checkpoint(str(ck), "critic")
    assert old.value_range[0] > old.value_range[1]
    # SFT restarts the critic from the policy: a fresh critic has fitted nothing.
    tr._run("sft", {"key": "s", "batch_dir": d, "preset": "small", "hyper": {"epochs": 1}}, tr.sft)
    assert tr._range_out() is None


def test_ppo_step_clips_its_baseline_to_the_range(tmp_path):
    """A critic whose values all lie above every return it was fitted on:
    clipped, every value is the greatest return, so the step's explained
    variance is exactly 0 (a constant), where the unclipped values (the
    fitted head's, shifted) keep the fitted critic's nonzero EV. The
    advantage R - V is then at most 0 and about 1 - mean R on average
    (policy loss under 2), where the unclipped baseline's is about -10; the
    value loss still reads the unclipped values (about 50: a clipped one
    would be under 1). A return above the range widens it."""
    eng = make_engine(seed=0)
    trajs = [rollout(eng, p, max_new=16, seed=i) for i, p in enumerate(prompts(6))]
    rewards = [0.0, 0.25, 1.0, 0.5, 1.0, 0.0]
    d = write_batch(tmp_path / "b", trajs, rewards)
    step = write_batch(tmp_path / "step", trajs, rewards[:-1] + [1.5])   # the step's batch: one return above the range
    torch.manual_seed(0)
    tr = make_trainer(tmp_path / "w", seed=0)
    fit = tr._run("critic_fit", {"key": "c/1", "batch_dir": d, **FIT}, tr.critic_fit)
    assert fit["value_range"] == [0.0, 1.0]
    _, ts = tr._load_batch({"batch_dir": d}, need_routing=False)
    p = B.pad(ts, "cpu")
    ret = torch.tensor(rewards)[:, None].expand_as(p.mask)[p.mask]
    with torch.no_grad():
        tr.critic.head.bias += 10.0   # every value far above the range
        raw = tr._values(p.inputs, mask=p.mask)[p.mask]
    assert raw.min() > 1.0
    unclipped_ev = ppo.explained_variance(raw, ret)
    assert abs(unclipped_ev) > 0.05, f"the shifted head's EV {unclipped_ev} must differ from the clipped constant's"
    tr._commit_state()
    res = tr._run("ppo_step", {"key": "c/ppo/1", "batch_dir": step, "preset": "small"}, tr.ppo_step)
    assert res["value_clipped"] == 1.0
    assert res["explained_variance"] == pytest.approx(0.0, abs=1e-6)
    assert res["policy_loss"] < 2, f"policy loss {res['policy_loss']}: the advantage's baseline was not clipped"
    assert res["value_loss"] > 10, f"value loss {res['value_loss']}: the critic trained on clipped values"
    assert res["value_range"] == [0.0, 1.5]


def test_an_epoch_saved_before_the_range_resumes(tmp_path):
    """A critic_fit's saved epoch from before the critic had its range
    (epochs.Progress) resumes into a critic that has one, keeping its range;
    any other key it lacks is an error."""
    import epochs
    tr = make_trainer(tmp_path / "w", seed=0)
    req = {"key": "c/1", "batch_dir": "b"}
    old = M.Transformer(tr.critic.cfg)
    del old._buffers[M.VALUE_RANGE]
    opt = torch.optim.Adam(old.parameters())
    gen = torch.Generator().manual_seed(0)
    epochs.Progress(str(tmp_path / "w"), req, 0).save(old, opt, gen, {"epoch": 1, "step": 2, "losses": [1.0], "tokens": 3})
    M.widen_range(tr.critic.value_range, torch.tensor([0.0, 1.0]))
    got = epochs.Progress(str(tmp_path / "w"), req, 0).load(tr.critic, torch.optim.Adam(tr.critic.parameters()), gen)
    assert got["epoch"] == 1 and tr._range_out() == [0.0, 1.0]
    assert torch.equal(tr.critic.head.weight, old.head.weight)
    del old.head._parameters["bias"]   # a state that lacks a real key
    epochs.Progress(str(tmp_path / "w"), req, 0).save(old, opt, gen, {"epoch": 1, "step": 2, "losses": [1.0], "tokens": 3})
    with pytest.raises(RuntimeError, match="head.bias"):
        epochs.Progress(str(tmp_path / "w"), req, 0).load(tr.critic, torch.optim.Adam(tr.critic.parameters()), gen)
