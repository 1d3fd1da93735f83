"""The HF trainer's protocol: idempotent sft / critic_fit / ppo_step (a retried
key returns its recorded result and trains nothing), a restart resuming the
committed state, and save -> the server's /update_weights_from_disk serving
exactly the trained weights."""
import hashlib
import json
import os

import pytest
import torch

import batch as B
import httpjson
from helpers import batch, make_engine, make_trainer, op, rollouts


def weights_digest(tr):
    h = hashlib.sha256()
    for m in (tr.actor, tr.critic):
        for k, v in sorted(m.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def commits(workdir):
    with open(os.path.join(workdir, "ops.log")) as f:
        return [rest.strip() for rest in (l.split(" ", 1)[1] for l in f) if rest.startswith("commit ")]


@pytest.fixture(scope="module")
def sampled(engines, tmp_path_factory):
    eng = engines("qwen3_moe")
    tmp = tmp_path_factory.mktemp("batches")
    return batch(tmp, "b", rollouts(eng, n=3, max_new=8, turns=2, temperature=0.9), rewards=[1.0, 0.0, 0.5])


def test_sft_critic_ppo_round_trip_with_retried_keys(tiny, sampled, tmp_path):
    work = tmp_path / "w"
    tr = make_trainer(work, tiny("qwen3_moe"))
    hyper = {"preset": "small", "hyper": {"update_epochs": 1, "minibatches": 2}}
    first = {}
    for name, key in (("sft", "c/sft/0"), ("critic_fit", "c/critic/0"), ("ppo_step", "c/ppo/0")):
        first[key] = op(tr, name, key, sampled, **hyper)
        assert first[key]["replayed"] is False
    assert tr.version == 3
    assert first["c/ppo/0"]["logprob_gap_replay_max"] > 0   # trained on: the policy moved after sampling
    digest = weights_digest(tr)
    for name, key in (("sft", "c/sft/0"), ("ppo_step", "c/ppo/0")):
        again = op(tr, name, key, sampled, **hyper)
        assert again["replayed"] is True
        assert {k: v for k, v in again.items() if k != "replayed"} == {k: v for k, v in first[key].items() if k != "replayed"}
    assert tr.version == 3 and weights_digest(tr) == digest, "a retried key trains nothing"
    with pytest.raises(httpjson.HTTPError, match="was used for sft"):
        op(tr, "ppo_step", "c/sft/0", sampled, **hyper)
    lines = commits(work)
    assert [l.split(" version=")[0] for l in lines] == ["commit sft c/sft/0", "commit critic_fit c/critic/0",
                                                         "commit ppo_step c/ppo/0"]
    # A restarted trainer resumes the committed state (weights, critic,
    # version) and still knows every key.
    tr2 = make_trainer(work, tiny("qwen3_moe"))
    assert tr2.version == 3 and weights_digest(tr2) == digest
    assert op(tr2, "ppo_step", "c/ppo/0", sampled, **hyper)["replayed"] is True
    assert os.path.exists(os.path.join(work, "state", "model.safetensors"))
    assert os.path.exists(os.path.join(work, "state", "critic.safetensors"))


def test_ppo_step_refuses_a_batch_without_routing(tiny, sampled, tmp_path):
    tr = make_trainer(tmp_path / "w", tiny("qwen3_moe"))
    _, trajs = B.load(sampled, 3, 8, 2, need_routing=False)
    bare = batch(tmp_path, "bare", [{"tokens": t.tokens.tolist(), "loss_mask": t.loss_mask.int().tolist(),
                                     "logprobs": t.logprobs.tolist()} for t in trajs])
    with pytest.raises(httpjson.HTTPError, match="RoutingMissing") as e:
        op(tr, "ppo_step", "k", bare)
    assert e.value.status == 422 and tr.version == 0


def test_saved_checkpoint_is_what_the_server_serves(tiny, engines, sampled, tmp_path):
    tr = make_trainer(tmp_path / "w", tiny("qwen3_moe"))
    op(tr, "ppo_step", "c/ppo/0", sampled, preset="small", hyper={"actor_lr": 3e-3})
    out = str(tmp_path / "ckpt")
    manifest = tr.save({"dir": out})
    assert manifest["weight_version"] == "v1" and manifest["config"]["model_type"] == "qwen3_moe"
    for f in manifest["files"]:
        with open(os.path.join(out, f["name"]), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == f["sha256"], f["name"]
    state = str(tmp_path / "served.json")
    eng = make_engine(tiny("qwen3_moe"), state=state)
    before = rollouts(eng, n=1, max_new=6, seed=7)
    assert eng.update_weights({"model_path": out})["weight_version"] == "v1"
    assert eng.info()["weight_version"] == "v1"
    after = rollouts(eng, n=1, max_new=6, seed=7)
    # The trainer's log-probs of what the server now samples match (R3, fp32):
    # the server serves exactly the trained weights, and not the old ones.
    for trajs, served_new in ((after, True), (before, False)):
        _, loaded = tr._load_batch({"batch_dir": batch(tmp_path, f"x{served_new}", trajs)}, need_routing=True)
        gap = float(tr.logprob_gaps(B.pad(loaded, "cpu"))["gap_replay"].max())
        assert (gap < 1e-4) == served_new, gap
    # A restarted server serves what it served before (--state).
    with open(state) as f:
        assert json.load(f)["model_path"] == os.path.abspath(out)
    again = make_engine(tiny("qwen3_moe"), state=state)
    assert again.info()["weight_version"] == "v1"
    p1 = tr.actor.get_decoder().embed_tokens.weight
    assert torch.equal(again.model.get_decoder().embed_tokens.weight, p1.detach())


def test_ppo_step_on_a_dense_model_needs_no_routing(tiny, tmp_path):
    """A dense policy (SmolLM2's Llama) has no experts: its rollouts carry no
    routed_experts (R3 off) and PPO trains them; the replay gap is the
    no-replay gap."""
    tr = make_trainer(tmp_path / "w", tiny("llama"))
    V = tr._facts()["vocab_size"]
    trajs = [{"tokens": [(7 * i + j) % V for j in range(12)], "loss_mask": [0] * 6 + [1] * 6,
              "logprobs": [0.0] * 6 + [-2.0] * 6, "temperature": 0.7} for i in range(2)]
    bare = batch(tmp_path, "dense", trajs, rewards=[1.0, 0.0])
    out = op(tr, "ppo_step", "c/ppo/0", bare, preset="small", hyper={"update_epochs": 1, "minibatches": 2})
    assert tr.version == 1 and out["trajectories"] == 2 and out["tokens"] == 12
    assert out["logprob_gap_replay"] == out["logprob_gap_noreplay"] > 0
