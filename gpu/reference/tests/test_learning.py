"""Does a PPO step move the policy the right way, on the right tokens, against
the right baseline? Each test here fails under a named bug:

  flipped advantage sign       test_positive_advantage_raises_logprob
  loss mask shifted by one     test_only_sampled_tokens_get_gradient
  stale old log-probs          test_old_logprobs_are_the_policy_before_the_update
  old log-probs re-taken each
  minibatch (ratio always 1)   test_clip_acts_with_default_hyperparameters
  log-probs at temperature 1   test_trainer_logprobs_at_the_sampling_temperature
"""
import pytest
import torch

import batch as B
import httpjson
import ppo
from helpers import episode, make_engine, make_trainer, rollout, write_batch


def loss_token_logp(tr, d):
    """Mean trainer log-prob (R3 replay, sampling temperature) of each trajectory's loss tokens."""
    cfg = tr.actor.cfg
    _, ts = B.load(d, cfg.n_layer, cfg.n_experts, cfg.top_k, True)
    p = B.pad(ts, "cpu")
    lp = tr.logprob_gaps(p)["replayed"]
    return [float(lp[i][p.mask[i]].mean()) for i in range(len(ts))]


def spy_policy_loss(monkeypatch):
    """Record the (approx_kl, clipfrac, max |ratio - 1|) of every minibatch."""
    seen, real = [], ppo.policy_loss

    def spy(new, old, adv, clip, is_weight=None):
        loss, s = real(new, old, adv, clip, is_weight)
        seen.append((s["approx_kl"], s["clipfrac"], float((new - old).detach().exp().sub(1).abs().max())))
        return loss, s
    monkeypatch.setattr(ppo, "policy_loss", spy)
    return seen


def test_positive_advantage_raises_logprob(tmp_path):
    """Reward well above the critic's value: the trajectory becomes likelier;
    well below: less likely. A flipped advantage sign reverses both."""
    eng = make_engine(seed=0)
    trajs = [rollout(eng, [257] + list(b"task %d" % i), max_new=16, seed=i) for i in range(2)]
    d = write_batch(tmp_path / "b", trajs, [3.0, -3.0])   # |V| of a fresh critic is well below 3
    tr = make_trainer(tmp_path / "w", seed=0)
    before = loss_token_logp(tr, d)
    res = tr._run("ppo_step", {"key": "sign", "batch_dir": d, "preset": "small"}, tr.ppo_step)
    after = loss_token_logp(tr, d)
    assert res["version"] == 1
    assert after[0] > before[0] + 0.05, f"positive advantage: mean log-prob {before[0]:.3f} -> {after[0]:.3f}"
    assert after[1] < before[1] - 0.05, f"negative advantage: mean log-prob {before[1]:.3f} -> {after[1]:.3f}"


@pytest.mark.parametrize("op", ["ppo_step", "sft"])
def test_only_sampled_tokens_get_gradient(tmp_path, monkeypatch, op):
    """The loss reaches exactly the tokens the policy sampled: not the prompt,
    not the observation glue between turns (a mask shifted by one trains the
    first glue token of every turn and skips the first sampled one)."""
    eng = make_engine(seed=1)
    t = episode(eng, [257] + list(b"fix the build"), turns=3, max_new=6, seed=1)
    d = write_batch(tmp_path / "b", [t], [1.0])
    tr = make_trainer(tmp_path / "w", seed=1)
    grads, real = [], tr._logp

    def spy(*a, **k):
        lp, ent = real(*a, **k)
        if lp.requires_grad:
            lp.retain_grad()
            grads.append(lp)
        return lp, ent
    monkeypatch.setattr(tr, "_logp", spy)
    hyper = {"update_epochs": 1, "minibatches": 1} if op == "ppo_step" else {"epochs": 1}
    tr._run(op, {"key": op, "batch_dir": d, "preset": "small", "hyper": hyper}, getattr(tr, op))
    g = grads[0].grad[0]                           # position j predicts token j + 1
    got = (g != 0).tolist()
    want = [bool(x) for x in t["loss_mask"][1:].tolist()]
    wrong = [j + 1 for j, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not wrong, f"tokens at {wrong} got gradient iff they are context (loss_mask {t['loss_mask'].tolist()})"


def test_old_logprobs_are_the_policy_before_the_update(tmp_path, monkeypatch):
    """The first minibatch's ratio is 1: the old log-probs are this policy's,
    before the update, on the sampler's experts. Not the sampler's own (a past
    policy version: the second step on the same batch shows it), not a forward
    without replay (the jittery sampler shows it)."""
    eng = make_engine(seed=2, jitter=0.5)
    trajs = [rollout(eng, [257] + list(b"job %d" % i), max_new=16, seed=i) for i in range(3)]
    d = write_batch(tmp_path / "b", trajs, [1.0, 0.0, 0.5])
    tr = make_trainer(tmp_path / "w", seed=2)
    seen = spy_policy_loss(monkeypatch)
    for step in (1, 2):
        seen.clear()
        tr._run("ppo_step", {"key": f"stale/{step}", "batch_dir": d, "preset": "small"}, tr.ppo_step)
        kl, clipfrac, ratio_dev = seen[0]
        assert ratio_dev < 1e-4 and abs(kl) < 1e-8, f"step {step}: first minibatch ratio off 1 by {ratio_dev}"


def test_clip_acts_with_default_hyperparameters(tmp_path, monkeypatch):
    """With the default epochs and minibatches the policy moves between
    minibatches, so the ratio leaves 1 and the clip acts: approx_kl and
    clipfrac are non-zero on a typical batch."""
    eng = make_engine(seed=0)
    trajs = [rollout(eng, [257] + list(b"t%d" % i), max_new=16, seed=i) for i in range(4)]
    d = write_batch(tmp_path / "b", trajs, [0.0, 0.25, 0.5, 1.0])
    tr = make_trainer(tmp_path / "w", seed=0)
    seen = spy_policy_loss(monkeypatch)
    res = tr._run("ppo_step", {"key": "clip", "batch_dir": d, "preset": "small"}, tr.ppo_step)
    h = ppo.Hyper()
    assert len(seen) == h.update_epochs * min(h.minibatches, 4) > 1
    assert res["approx_kl"] > 1e-5 and res["clipfrac"] > 0, res
    assert all(kl > 0 for kl, _, _ in seen[1:]), "every minibatch after the first sees a moved policy"


@pytest.mark.parametrize("field,value", [("kl_coef", 0.1), ("lb_coef", 0.01), ("update_epochs", 0)])
def test_unsupported_hyperparameters_are_refused(tmp_path, field, value):
    eng = make_engine(seed=0)
    d = write_batch(tmp_path / "b", [rollout(eng, [257, 104, 105], max_new=8)], [1.0])
    tr = make_trainer(tmp_path / "w")
    with pytest.raises(httpjson.HTTPError) as e:
        tr._run("ppo_step", {"key": field, "batch_dir": d, "hyper": {field: value}}, tr.ppo_step)
    assert e.value.status == 400 and f"hyper.{field}" in str(e.value)
    assert tr.version == 0


def test_trainer_logprobs_at_the_sampling_temperature(tmp_path):
    """Sampled at 0.7, the trainer's replayed log-probs match the sampler's to
    float noise when meta.json says 0.7, and miss by far when it says nothing."""
    eng = make_engine(seed=6)
    trajs = [rollout(eng, [257] + list(b"warm %d" % i), max_new=24, seed=i, temperature=0.7) for i in range(3)]
    tr = make_trainer(tmp_path / "w", seed=6)
    res = tr._run("ppo_step", {"key": "t07", "batch_dir": write_batch(tmp_path / "b", trajs, [0.5] * 3)}, tr.ppo_step)
    assert res["logprob_gap_replay_max"] < 1e-4, res
    tr2 = make_trainer(tmp_path / "w2", seed=6)
    res = tr2._run("ppo_step", {"key": "t1", "batch_dir": write_batch(tmp_path / "b2", trajs, [0.5] * 3, temperature=None)}, tr2.ppo_step)
    assert res["logprob_gap_replay"] > 0.05, "a batch that leaves temperature out is read at 1.0"


@pytest.mark.parametrize("value", [0, -0.5, "hot"])
def test_temperature_must_be_positive(tmp_path, value):
    eng = make_engine(seed=0)
    d = write_batch(tmp_path / "b", [rollout(eng, [257, 104, 105], max_new=8)], [1.0], temperature=value)
    tr = make_trainer(tmp_path / "w")
    with pytest.raises(httpjson.HTTPError) as e:
        tr._run("ppo_step", {"key": "t", "batch_dir": d}, tr.ppo_step)
    assert e.value.status == 400 and "trajectories[0].temperature" in str(e.value)
