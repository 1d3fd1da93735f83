"""Off-policy correction from the sampler's log-probs (ppo.is_correction):
TIS and MIS weights on a constructed batch with known log-probs, the default
"none" leaving PPO's update exactly as it was, and a batch without sampler
log-probs refused by name."""
import hashlib
import math
import os

import pytest
import torch

import batch as B
import httpjson
import ppo
import safetensors_io
from helpers import make_engine, make_trainer, rollout, write_batch

# Two trajectories of 5 positions; position 4 of the second is padding.
OLD = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.0],
                    [-0.2, -4.0, -1.0, -1.0, 0.0]])
SAMPLER = OLD - torch.tensor([[0.0, math.log(3.0), math.log(0.25), math.log(1.5), 0.0],
                              [math.log(0.6), math.log(2.5), 0.0, math.log(0.4), 0.0]])
MASK = torch.tensor([[False, True, True, True, True],
                     [True, True, False, True, False]])
# rho = exp(OLD - SAMPLER) at the loss tokens, in mask order.
RHO = torch.tensor([3.0, 0.25, 1.5, 1.0, 0.6, 2.5, 0.4])


def k3(rho):
    return float((rho - 1 - rho.log()).mean())


def test_tis_truncates_the_ratio_at_the_cap():
    w, s = ppo.is_weights(OLD, SAMPLER, MASK, "tis", 2.0)
    want = RHO.clamp(max=2.0)
    assert torch.allclose(w[MASK], want, atol=1e-6)
    assert s["is_weight_max"] == pytest.approx(2.0)
    assert s["is_weight_mean"] == pytest.approx(float(want.mean()), abs=1e-6)
    assert s["is_masked_share"] == 0.0
    assert s["sampler_kl"] == pytest.approx(k3(RHO), abs=1e-6)


def test_mis_masks_tokens_outside_the_band():
    w, s = ppo.is_weights(OLD, SAMPLER, MASK, "mis", 2.0)
    keep = (RHO >= 0.5) & (RHO <= 2.0)      # 3.0, 0.25, 2.5 and 0.4 are out
    assert torch.allclose(w[MASK], torch.where(keep, RHO, torch.zeros_like(RHO)), atol=1e-6)
    assert s["is_masked_share"] == pytest.approx(4 / 7)
    assert s["is_weight_mean"] == pytest.approx(float(RHO[keep].mean()), abs=1e-6)
    assert s["is_weight_max"] == pytest.approx(1.5, abs=1e-6)
    assert s["sampler_kl"] == pytest.approx(k3(RHO), abs=1e-6)


def test_none_has_no_weights_but_reports_the_mismatch():
    w, s = ppo.is_weights(OLD, SAMPLER, MASK, "none", 2.0)
    assert w is None and set(s) == {"sampler_kl"}
    assert s["sampler_kl"] == pytest.approx(k3(RHO), abs=1e-6)


def test_weights_multiply_each_tokens_term():
    adv = torch.tensor([1.0, -1.0, 2.0])
    logp = torch.tensor([-1.0, -2.0, -3.0])
    w = torch.tensor([2.0, 0.0, 0.5])
    loss, _ = ppo.policy_loss(logp, logp, adv, 0.2, w)
    assert float(loss) == pytest.approx((-2.0 * 1 + 0.0 - 0.5 * 2) / 3)


def legacy_policy_loss(new_logp, old_logp, adv, clip_coef, is_weight=None):
    """policy_loss as it was before the correction existed."""
    assert is_weight is None, "is_correction = none must not weight the loss"
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return loss, {"approx_kl": float(approx_kl), "clipfrac": float(clipfrac)}


def digest(tr):
    h = hashlib.sha256()
    for m in (tr.actor, tr.critic):
        for k, v in sorted(m.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def jittery(tmp_path_factory):
    """A batch whose sampler routes with jitter and samples in bfloat16: its
    log-probs differ from the trainer's, so the importance weights leave 1."""
    eng = make_engine(seed=5, jitter=0.3, sample_dtype="bfloat16")
    trajs = [rollout(eng, [257] + list(b"job %d" % i), max_new=16, seed=i) for i in range(3)]
    return write_batch(tmp_path_factory.mktemp("b") / "b", trajs, [1.0, 0.0, 0.5])


def step(tmp, d, name, **hyper):
    tr = make_trainer(tmp / name, seed=5)
    res = tr._run("ppo_step", {"key": f"c/ppo/{name}", "batch_dir": d, "preset": "small", "hyper": hyper}, tr.ppo_step)
    return tr, res


def test_default_none_trains_exactly_as_before(tmp_path, jittery, monkeypatch):
    _, res = step(tmp_path, jittery, "default")
    now = digest(_)
    _, explicit = step(tmp_path, jittery, "none", is_correction="none")
    assert digest(_) == now
    monkeypatch.setattr(ppo, "policy_loss", legacy_policy_loss)
    legacy, before = step(tmp_path, jittery, "legacy")
    assert digest(legacy) == now, "the default must train bit-for-bit as the uncorrected loss did"
    assert res["policy_loss"] == before["policy_loss"] and "is_weight_mean" not in res
    assert res["sampler_kl"] > 0


@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_correction_reaches_the_update(tmp_path, jittery, mode):
    plain, _ = step(tmp_path, jittery, "plain")
    tr, res = step(tmp_path, jittery, mode, is_correction=mode, is_cap=1.005)
    assert digest(tr) != digest(plain), "the weights must change the update"
    assert 0 < res["is_weight_mean"] <= res["is_weight_max"] <= 1.005 + 1e-6
    if mode == "mis":
        assert 0 < res["is_masked_share"] < 1
    else:
        assert res["is_masked_share"] == 0


def test_missing_sampler_logprobs_are_refused_by_name(tmp_path, jittery):
    d = tmp_path / "nolp"
    os.makedirs(d)
    for f in ("meta.json", "traj-0000.safetensors", "traj-0002.safetensors"):
        os.link(os.path.join(jittery, f), d / f)
    t, _ = safetensors_io.load(os.path.join(jittery, "traj-0001.safetensors"))
    del t["logprobs"]
    safetensors_io.save(str(d / "traj-0001.safetensors"), t, {"rollout_id": "camp/ppo/1/task-7", "context": "2"})
    with pytest.raises(httpjson.HTTPError) as e:
        step(tmp_path, str(d), "tis", is_correction="tis")
    assert e.value.status == 400
    msg = str(e.value)
    assert "traj-0001.safetensors" in msg and "rollout camp/ppo/1/task-7, context 2" in msg and "logprobs" in msg
    step(tmp_path, str(d), "none")   # without the correction the batch trains as before


def test_non_finite_sampler_logprob_is_refused():
    t = B.Trajectory("x.safetensors", torch.tensor([1, 2, 3]), torch.tensor([False, True, True]),
                     torch.tensor([0.0, -1.0, float("nan")]), None, 1.0, origin="rollout r1")
    with pytest.raises(ValueError, match="x.safetensors .rollout r1.: holds a non-finite"):
        B.require_sampler_logprobs([t], "tis")


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="hyper.is_correction = 'is'"):
        ppo.Hyper.from_dict({"is_correction": "is"})
    with pytest.raises(ValueError, match="hyper.is_cap = 0.5 must be"):
        ppo.Hyper.from_dict({"is_correction": "tis", "is_cap": 0.5})


def test_tis_is_decoupled_ppo(tmp_path, jittery, monkeypatch):
    """With a correction on, the loss is decoupled PPO: the ratio is clipped
    against the proximal policy (the trainer's own forward at the step's
    start), and the behaviour policy (the sampler: other kernels, bfloat16,
    stale weights) enters only through the importance weight. Clipping
    against the sampler's log-probs instead would leave the first
    minibatch's ratio off 1 on this batch."""
    seen = []
    real = ppo.policy_loss

    def spy(new_logp, old_logp, adv, clip_coef, is_weight=None):
        seen.append((new_logp.detach().clone(), old_logp.detach().clone(), is_weight))
        return real(new_logp, old_logp, adv, clip_coef, is_weight)

    monkeypatch.setattr(ppo, "policy_loss", spy)
    tr, res = step(tmp_path, jittery, "decoupled", is_correction="tis", is_cap=1e6)
    assert res["sampler_kl"] > 0, "the batch's sampler must differ from the trainer for this to show anything"
    new0, old0, w0 = seen[0]
    # First minibatch, weights not yet moved: the proximal ratio is 1 exactly...
    assert torch.allclose(new0, old0, atol=1e-5), "the clip must be taken against the trainer's forward at the step's start"
    # ...and the behaviour correction is the weight, exp(proximal - sampler).
    assert w0 is not None and float((w0 - 1).abs().max()) > 1e-3
    # Later minibatches move away from the proximal policy, which stays fixed.
    assert all(torch.equal(o, seen[0][1]) for _, o, _ in seen[:1])
    assert len(seen) > 1 and any(not torch.allclose(n, o, atol=1e-6) for n, o, _ in seen[1:])
