"""ppo.is_correction on the HF trainer: a batch whose sampler log-probs are
shifted by known amounts (a sampler off the trainer's policy) gets the TIS and
MIS weights those shifts imply, the weights change the update, the default
trains without them, and a trajectory without sampler log-probs is refused
by name."""
import copy
import hashlib
import math

import pytest
import torch

import httpjson
from helpers import batch, make_trainer, op, rollouts

UP, DOWN = 0.5, -1.0   # log(pi_trainer / pi_sampler) put on alternate loss tokens


def digest(tr):
    h = hashlib.sha256()
    for k, v in sorted(tr.actor.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def shifted(engines, tmp_path_factory):
    """(batch dir, share of loss tokens shifted DOWN) from rollouts whose
    recorded log-probs are moved so that rho = exp(UP) or exp(DOWN)."""
    trajs = copy.deepcopy(rollouts(engines("qwen3_moe"), n=2, max_new=8, turns=1, temperature=1.0))
    down = total = 0
    for t in trajs:
        j = 0
        for i, m in enumerate(t["loss_mask"]):
            if m and i > 0:   # position 0 is never trained (nothing predicts it)
                d = UP if j % 2 == 0 else DOWN
                t["logprobs"][i] -= d
                down += d == DOWN
                total += 1
                j += 1
    return batch(tmp_path_factory.mktemp("shifted"), "b", trajs, rewards=[1.0, 0.0]), down / total


def ppo(tiny, tmp_path, d, name, **hyper):
    tr = make_trainer(tmp_path / name, tiny("qwen3_moe"))
    res = op(tr, "ppo_step", f"c/ppo/{name}", d, preset="small", hyper=dict(update_epochs=1, minibatches=1, **hyper))
    return tr, res


def test_tis_and_mis_weights_on_shifted_sampler(tiny, shifted, tmp_path):
    d, down = shifted
    plain, res0 = ppo(tiny, tmp_path, d, "none")
    assert "is_weight_mean" not in res0 and res0["sampler_kl"] > 0.05
    tis, res = ppo(tiny, tmp_path, d, "tis", is_correction="tis", is_cap=1.2)
    assert digest(tis) != digest(plain), "TIS weights must change the update"
    # Up-shifted tokens truncate at 1.2; down-shifted ones keep exp(-1).
    want = (1 - down) * 1.2 + down * math.exp(DOWN)
    assert res["is_weight_max"] == pytest.approx(1.2, abs=1e-4)
    assert res["is_weight_mean"] == pytest.approx(want, abs=0.02) and res["is_masked_share"] == 0
    _, res = ppo(tiny, tmp_path, d, "mis", is_correction="mis", is_cap=2.0)
    assert res["is_masked_share"] == pytest.approx(down, abs=1e-6)      # exp(-1) < 1/2: masked
    assert res["is_weight_mean"] == pytest.approx(math.exp(UP), abs=0.02)


def test_missing_sampler_logprobs_refused(tiny, engines, tmp_path):
    import os
    import safetensors_io
    d = batch(tmp_path, "b", rollouts(engines("qwen3_moe"), n=1, max_new=6), rewards=[1.0])
    f = os.path.join(d, "traj-0000.safetensors")
    t, _ = safetensors_io.load(f)
    del t["logprobs"]
    safetensors_io.save(f, t, {"rollout_id": "c/ppo/3/r9", "context": "0"})
    with pytest.raises(httpjson.HTTPError, match=r"traj-0000.safetensors \(rollout c/ppo/3/r9, context 0\): has no logprobs"):
        ppo(tiny, tmp_path, d, "tis", is_correction="tis")
