import math
import os

import pytest
import torch

import batch as B
import httpjson
import model as M
import ppo
import safetensors_io
from helpers import make_engine, make_trainer, rollout, write_batch


def test_model_shapes_and_routing_capture():
    torch.manual_seed(0)
    cfg = M.Config()
    m = M.Transformer(cfg)
    ids = torch.randint(0, 256, (2, 10))
    logits, routing = m(ids)
    assert logits.shape == (2, 10, cfg.vocab_size)
    assert routing.shape == (2, 10, cfg.n_layer, cfg.top_k)
    assert routing.min() >= 0 and routing.max() < cfg.n_experts
    # top-k picks distinct experts per token
    assert (routing[..., 0] != routing[..., 1]).all()
    # replaying the captured routing reproduces the forward exactly
    again, used = m(ids, routing=routing)
    assert torch.equal(used, routing)
    assert torch.allclose(again, logits)
    critic = M.Transformer(M.Config(value_head=True))
    values, _ = critic(ids)
    assert values.shape == (2, 10)


def test_tokenizer_round_trip_with_specials():
    tok = M.Tokenizer()
    s = "<|im_start|><|assistant|>ls -la ~/é<|im_end|>"
    ids = tok.encode(s)
    assert ids[0] == tok.im_start and ids[-1] == tok.im_end
    assert tok.decode(ids) == s


def test_gae_hand_computed():
    r = torch.tensor([0.0, 0.0, 1.0])
    v = torch.tensor([0.5, 0.2, 0.4])
    adv, ret = ppo.gae(r, v, 1.0, 1.0)
    # gamma = lambda = 1 telescopes to R - V_t
    assert torch.allclose(adv, torch.tensor([0.5, 0.8, 0.6]))
    assert torch.allclose(ret, torch.tensor([1.0, 1.0, 1.0]))
    adv, _ = ppo.gae(r, v, 0.9, 0.5)
    # deltas -0.32, 0.16, 0.6; A2 = 0.6, A1 = 0.16 + 0.45*0.6, A0 = -0.32 + 0.45*A1
    assert torch.allclose(adv, torch.tensor([-0.1265, 0.43, 0.6]), atol=1e-6)


def test_explained_variance():
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert ppo.explained_variance(y, y) == pytest.approx(1.0)
    assert ppo.explained_variance(torch.full_like(y, 2.5), y) == pytest.approx(0.0)
    assert ppo.explained_variance(torch.tensor([1.0, 2.0, 3.0, 5.0]), y) == pytest.approx(1 - 0.1875 / 1.25)
    assert math.isnan(ppo.explained_variance(y, torch.ones(4)))


def test_ppo_loss_on_fixed_batch():
    adv = torch.tensor([1.0, -1.0, 2.0])
    same = torch.tensor([-1.0, -2.0, -3.0])
    loss, s = ppo.policy_loss(same, same, adv, 0.2)
    assert float(loss) == pytest.approx(-adv.mean().item())
    assert s["clipfrac"] == 0 and s["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    new = same + math.log(1.5)  # ratio 1.5 everywhere
    loss, s = ppo.policy_loss(new, same, adv, 0.2)
    # positive advantages are clipped at 1.2; the negative one keeps the pessimistic 1.5
    expected = (-1.2 * 1.0 + 1.5 * 1.0 - 1.2 * 2.0) / 3
    assert float(loss) == pytest.approx(expected)
    assert s["clipfrac"] == 1.0
    assert s["approx_kl"] == pytest.approx(0.5 - math.log(1.5))


def test_r3_replay_reproduces_sampler_logprobs(tmp_path):
    """A jittery sampler flips experts; replaying its routing closes the log-prob gap."""
    eng = make_engine(seed=3, jitter=0.5)
    trajs = [rollout(eng, [257] + list(b"prompt %d" % i), max_new=32, seed=i) for i in range(4)]
    d = write_batch(tmp_path / "b", trajs, [0.1, 0.2, 0.3, 0.4])
    tr = make_trainer(tmp_path / "w", seed=3)
    cfg = tr.actor.cfg
    _, ts = B.load(d, cfg.n_layer, cfg.n_experts, cfg.top_k, True)
    g = tr.logprob_gaps(B.pad(ts, "cpu"))
    gap_replay, gap_free, flips = g["gap_replay"], g["gap_free"], g["flips"]
    assert flips.any(), "router jitter should flip some experts"
    assert gap_replay.max() < 1e-4, "with replay the trainer reproduces the sampler up to float precision"
    assert gap_free[flips].mean() > 10 * max(gap_replay.mean(), 1e-7)
    assert gap_replay.mean() < gap_free.mean()


def test_r3_gap_with_bf16_sampling(tmp_path):
    eng = make_engine(seed=4, sample_dtype="bfloat16", jitter=0.0)
    trajs = [rollout(eng, [257] + list(b"task %d" % i), max_new=24, seed=i) for i in range(3)]
    d = write_batch(tmp_path / "b", trajs, [1.0, 0.0, 0.5])
    tr = make_trainer(tmp_path / "w", seed=4)
    res = tr._run("ppo_step", {"key": "bf16/1", "batch_dir": d}, tr.ppo_step)
    assert res["logprob_gap_replay"] <= res["logprob_gap_noreplay"]
    assert res["logprob_gap_replay"] < 0.1


def test_ppo_step_metrics_and_idempotency(tmp_path):
    eng = make_engine(seed=0)
    trajs = [rollout(eng, [257] + list(b"t%d" % i), max_new=16, seed=i) for i in range(3)]
    d = write_batch(tmp_path / "b", trajs, [0.0, 0.5, 1.0])
    tr = make_trainer(tmp_path / "w", seed=0)
    _, ts = tr._load_batch({"batch_dir": d}, need_routing=False)
    p = B.pad(ts, "cpu")
    ret = p.mask.double() * torch.tensor([t.reward for t in ts], dtype=torch.float64)[:, None]
    v, _ = tr._baseline(p.inputs, p.mask)   # the critic before the step: the advantage's baseline
    res = tr._run("ppo_step", {"key": "c/ppo/1", "batch_dir": d, "preset": "small"}, tr.ppo_step)
    # GAE with gamma = lambda = 1: each token's advantage is R - V; a critic
    # that values the batch above its returns pushes every answer down.
    assert res["advantage_mean"] == pytest.approx(float((ret - v.double())[p.mask].mean()), abs=1e-6)
    for k in ("policy_loss", "value_loss", "clipfrac", "approx_kl", "entropy", "explained_variance",
              "logprob_gap_replay", "logprob_gap_noreplay"):
        assert k in res and not (isinstance(res[k], float) and math.isnan(res[k]) and k != "explained_variance"), k
    assert res["version"] == 1 and not res["replayed"]
    assert res["ceiling_ev"] == pytest.approx(ppo.prefix_ceiling_ev(p.inputs, p.mask, ret, torch.ones(3, dtype=torch.bool)))
    again = tr._run("ppo_step", {"key": "c/ppo/1", "batch_dir": d, "preset": "small"}, tr.ppo_step)
    assert again["replayed"] and again["version"] == 1 and tr.version == 1
    log = open(os.path.join(tmp_path, "w", "ops.log")).read()
    assert log.count("commit ppo_step c/ppo/1") == 1


def test_missing_routing_is_an_error(tmp_path):
    eng = make_engine(seed=0)
    t = rollout(eng, [257, 104, 105], max_new=8)
    del t["routed_experts"]
    d = write_batch(tmp_path / "b", [t], [1.0])
    tr = make_trainer(tmp_path / "w")
    with pytest.raises(httpjson.HTTPError) as e:
        tr._run("ppo_step", {"key": "k", "batch_dir": d}, tr.ppo_step)
    assert e.value.status == 422 and "RoutingMissing" in str(e.value)
    assert tr.version == 0
    t2 = rollout(eng, [257, 104, 105], max_new=8)
    t2["routed_experts"] = t2["routed_experts"][:3]  # too short
    d2 = write_batch(tmp_path / "b2", [t2], [1.0])
    with pytest.raises(httpjson.HTTPError, match="covers 3 positions"):
        tr._run("ppo_step", {"key": "k2", "batch_dir": d2}, tr.ppo_step)


def test_critic_warmup_raises_explained_variance(tmp_path):
    """Rewards depend on the first prompt token; a warmed-up critic learns that."""
    torch.manual_seed(0)
    trajs, rewards = [], []
    for i in range(8):
        good = i % 2 == 0
        prompt = [257, 65 if good else 66] + torch.randint(97, 123, (6,)).tolist()
        resp = torch.randint(97, 123, (10,)).tolist()
        tokens = prompt + resp
        trajs.append({"tokens": torch.tensor(tokens, dtype=torch.int32),
                      "loss_mask": torch.tensor([0] * len(prompt) + [1] * len(resp), dtype=torch.uint8),
                      "logprobs": torch.zeros(len(tokens))})
        rewards.append(0.8 if good else 0.1)
    d = write_batch(tmp_path / "b", trajs, rewards)
    tr = make_trainer(tmp_path / "w", seed=0)
    res = tr._run("critic_fit", {"key": "warm", "batch_dir": d, "preset": "small", "hyper": {"epochs": 60}}, tr.critic_fit)
    assert res["explained_variance_before"] <= 0
    assert res["explained_variance"] > 0.5


def sft_batch(path):
    tok = M.Tokenizer()
    trajs = []
    for i in range(4):
        p = tok.encode("<|im_start|><|user|>list files<|im_end|><|im_start|><|assistant|>")
        r = tok.encode('{"commands": [{"keystrokes": "ls -la\\n"}]}<|im_end|>')
        trajs.append({"tokens": torch.tensor(p + r, dtype=torch.int32),
                      "loss_mask": torch.tensor([0] * len(p) + [1] * len(r), dtype=torch.uint8)})
    return write_batch(path, trajs, [0.0] * 4)


def test_sft_lowers_loss(tmp_path):
    d = sft_batch(tmp_path / "b")
    tr = make_trainer(tmp_path / "w")
    res = tr._run("sft", {"key": "sft", "batch_dir": d, "preset": "small", "hyper": {"epochs": 30}}, tr.sft)
    assert res["loss"] < 0.5 * res["loss_first"]


def test_rl_starts_with_a_fresh_actor_optimizer(tmp_path):
    """SFT's Adam moments do not carry into PPO: after SFT an update with no
    gradient leaves the policy where it is. With SFT's momentum kept it
    moves every parameter SFT moved; so does a restart from the state SFT
    committed."""
    d = sft_batch(tmp_path / "b")
    tr = make_trainer(tmp_path / "w")
    res = tr._run("sft", {"key": "sft", "batch_dir": d, "preset": "small", "hyper": {"epochs": 3}}, tr.sft)
    assert res["actor_optimizer"] == "fresh"
    for t in (tr, make_trainer(tmp_path / "w")):   # the live trainer, then one restarted from its state
        before = [p.detach().clone() for p in t.actor.parameters()]
        for p in t.actor.parameters():
            p.grad = torch.zeros_like(p)
        t.actor_opt.step()
        moved = sum(int(not torch.equal(a, p)) for a, p in zip(before, t.actor.parameters()))
        assert moved == 0, f"{moved} parameter tensors moved on a zero gradient: SFT's momentum carried into RL"


def test_safetensors_round_trip(tmp_path):
    p = str(tmp_path / "x.safetensors")
    safetensors_io.save(p, {"a": torch.arange(6, dtype=torch.int32).view(2, 3), "b": torch.ones(2), "c": torch.zeros(3, dtype=torch.uint8)}, {"v": 1})
    t, meta = safetensors_io.load(p)
    assert t["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and t["b"].dtype == torch.float32 and t["c"].dtype == torch.uint8
    assert meta == {"v": "1"}
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 4)
    with pytest.raises(ValueError, match="truncated"):
        safetensors_io.load(p)


def test_server_drops_routing_when_told():
    eng = make_engine(drop=1.0)
    r = eng.generate({"input_ids": [257, 1, 2], "sampling_params": {"max_new_tokens": 2}, "return_routed_experts": True})
    assert "routed_experts" not in r["meta_info"] and r["meta_info"]["routed_experts_dropped"]


def test_server_routing_rows_are_t_minus_one():
    """As SGLang: rows for positions [routed_experts_start_len, len - 1); the
    last sampled token has not been forwarded and has none."""
    eng = make_engine()
    r = eng.generate({"input_ids": [257, 10, 20, 30], "sampling_params": {"max_new_tokens": 5, "seed": 2, "stop_token_ids": []},
                      "return_routed_experts": True, "routed_experts_start_len": 2, "return_logprob": True})
    import base64
    n = len(base64.b64decode(r["meta_info"]["routed_experts"])) // 4
    cfg = eng.model.cfg
    assert n == (4 + len(r["output_ids"]) - 1 - 2) * cfg.n_layer * cfg.top_k
    assert eng.info()["config"]["num_hidden_layers"] == cfg.n_layer
    assert len(r["meta_info"]["output_token_logprobs"]) == len(r["output_ids"])


def test_chat_completions():
    eng = make_engine()
    r = eng.chat({"model": "ref", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                  "max_tokens": 8, "seed": 1})
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    assert r["choices"][0]["finish_reason"] in ("stop", "length")
    assert r["usage"]["completion_tokens"] <= 8
    with pytest.raises(httpjson.HTTPError):
        eng.chat({"messages": [{"role": "robot", "content": "x"}]})


def test_explained_variance_of_constant_returns_is_undefined():
    y = torch.full((10,), 0.05, dtype=torch.float32)
    assert math.isnan(ppo.explained_variance(torch.zeros(10), y))


def test_restarted_server_serves_the_last_loaded_checkpoint(tmp_path):
    tr = make_trainer(tmp_path / "trainer", seed=3)
    ck = tmp_path / "ck"
    tr.save({"dir": str(ck)})
    state = str(tmp_path / "served.json")
    eng = make_engine(seed=0, state=state)
    assert eng.weight_version == "random-0"
    eng.update_weights({"model_path": str(ck)})
    loaded = eng.weight_version
    assert loaded != "random-0"
    # A new process with the same --state comes back with those weights, not the init.
    again = make_engine(seed=0, state=state)
    assert again.weight_version == loaded and again.model_path == os.path.abspath(str(ck))
    # A state naming a checkpoint that is gone falls back to the init.
    import shutil
    shutil.rmtree(ck)
    assert make_engine(seed=0, state=state).weight_version == "random-0"


def test_init_restores_the_seeded_random_weights(tmp_path):
    """A campaign's init (random, seed) replaces whatever the trainer learned
    before: the weights equal a fresh trainer's with that seed, at version 0."""
    tok = M.Tokenizer()
    p = tok.encode("<|im_start|><|user|>list files<|im_end|><|im_start|><|assistant|>")
    r = tok.encode('{"commands": [{"keystrokes": "ls\\n"}]}<|im_end|>')
    d = write_batch(tmp_path / "b", [{"tokens": torch.tensor(p + r, dtype=torch.int32),
                                      "loss_mask": torch.tensor([0] * len(p) + [1] * len(r), dtype=torch.uint8)}], [0.0])
    fresh = make_trainer(tmp_path / "fresh", seed=7)
    tr = make_trainer(tmp_path / "w", seed=0)
    tr._run("sft", {"key": "a/sft", "batch_dir": d, "preset": "small"}, tr.sft)
    assert tr.version == 1
    assert tr.init({"seed": 7}) == {"version": 0, "weight_version": "v0"}
    for k, v in fresh.actor.state_dict().items():
        assert torch.equal(v, tr.actor.state_dict()[k]), k
    again = make_trainer(tmp_path / "w")   # a restart keeps the init (it is committed)
    assert again.version == 0 and torch.equal(again.actor.head.weight, fresh.actor.head.weight)
    with pytest.raises(httpjson.HTTPError):
        tr.init({"seed": "x"})


def test_score_matches_the_sampler_and_replays_routing(tmp_path):
    """/score gives the sampler's log-probs for the tokens it sampled (same
    weights, the sampler's routing replayed), and not another model's."""
    import base64
    import numpy as np
    from helpers import make_engine, make_trainer
    eng = make_engine(seed=0, jitter=0.5)   # a jittery router: replay decides
    tr = make_trainer(tmp_path / "t")
    ck = tmp_path / "ck"
    tr.save({"dir": str(ck)})
    eng.load(str(ck))
    prompt = [257, 10, 20, 30]
    r = eng.generate({"input_ids": prompt, "return_logprob": True, "return_routed_experts": True,
                      "sampling_params": {"max_new_tokens": 6, "seed": 3, "stop_token_ids": [], "temperature": 0.8}})
    out = r["output_ids"]
    cfg = eng.model.cfg
    rows = np.frombuffer(base64.b64decode(r["meta_info"]["routed_experts"]), dtype="<i4").reshape(-1, cfg.n_layer, cfg.top_k)
    assert rows.shape[0] == len(prompt) + len(out) - 1
    got = tr.score({"tokens": prompt + out, "routing": rows.tolist(), "temperature": 0.8})["logprobs"][len(prompt) - 1:]
    want = [lp for lp, _, _ in r["meta_info"]["output_token_logprobs"]]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4
    # Shifted by one row (an off-by-one in the T-1 alignment), replay is wrong.
    shifted = np.concatenate([rows[1:], rows[-1:]]).tolist()
    bad = tr.score({"tokens": prompt + out, "routing": shifted, "temperature": 0.8})["logprobs"][len(prompt) - 1:]
    assert max(abs(a - b) for a, b in zip(bad, want)) > 1e-3
    import pytest
    import httpjson
    for body in ({"tokens": [1]}, {"tokens": prompt + out, "routing": rows[:-1].tolist()}, {"tokens": prompt, "temperature": 0}):
        with pytest.raises(httpjson.HTTPError):
            tr.score(body)


def test_target_kl_stops_the_actor_not_the_critic(tmp_path):
    """PPO's early stop: once a minibatch's approx_kl against the step's
    starting policy passes target_kl, the actor takes no more updates that
    step; the critic's fit is the same as without the stop."""
    eng = make_engine(seed=0)
    trajs = [rollout(eng, [257] + list(b"k%d" % i), max_new=16, seed=i) for i in range(3)]
    d = write_batch(tmp_path / "b", trajs, [0.0, 0.5, 1.0])
    runs = {}
    for name, kl in (("free", 0.0), ("stopped", 1e-6)):
        tr = make_trainer(tmp_path / name, seed=0)
        before = {k: v.clone() for k, v in tr.actor.state_dict().items()}
        res = tr._run("ppo_step", {"key": "c/ppo/1", "batch_dir": d, "preset": "small", "hyper": {"target_kl": kl}}, tr.ppo_step)
        moved = max(float((v - before[k]).abs().max()) for k, v in tr.actor.state_dict().items())
        runs[name] = (res, moved, tr.actor.state_dict(), tr.critic.state_dict(), dict(tr.progress["metrics"]))
    free, stopped = runs["free"][0], runs["stopped"][0]
    # 3 trajectories: 3 minibatches of one, 2 epochs. The first minibatch is
    # the starting policy (approx_kl 0); after one update the next exceeds 1e-6.
    assert free["actor_updates"] == 6 and free["kl_stop_minibatch"] == 0
    assert stopped["actor_updates"] == 1 and stopped["kl_stop_minibatch"] == 2
    assert runs["stopped"][1] > 0, "the one update before the stop moved nothing"
    assert any(not torch.equal(v, runs["stopped"][2][k]) for k, v in runs["free"][2].items())
    for k, v in runs["free"][3].items():
        assert torch.equal(v, runs["stopped"][3][k]), f"the critic's {k} differs: the stop reached the critic"
    assert free["value_loss"] == pytest.approx(stopped["value_loss"], abs=0)
    # The last tick (minibatch 6) trained the critic only: no policy loss to show.
    assert "policy_loss" in runs["free"][4] and set(runs["stopped"][4]) == {"value_loss"}
    with pytest.raises(ValueError, match="target_kl"):
        ppo.Hyper.from_dict({"target_kl": -0.1})


def test_min_pos_ratio_backtracks_the_actor_update(tmp_path):
    """After the update, the step measures it on its whole batch (post_kl,
    pos_ratio_min over the tokens with a positive advantage); with
    min_pos_ratio an update under which such a token keeps less of its
    probability is halved toward the starting weights until none does. Only
    the actor moves back: the critic is the same as without it."""
    eng = make_engine(seed=0)
    # One answer, earning 1 once and 0 three times: the update pushes its
    # tokens down on balance, the positive-advantage copy's included (the
    # collapse's shape: good and bad answers sharing tokens).
    # Another answer earning 0 is pushed down harder still: the floor reads
    # the positive-advantage tokens only.
    t = rollout(eng, [257] + list(b"same"), max_new=16, seed=0)
    u = rollout(eng, [257] + list(b"other"), max_new=16, seed=1)
    d = write_batch(tmp_path / "b", [t, t, t, t, u], [1.0, 0.0, 0.0, 0.0, 0.0])
    runs = {}
    for name, floor in (("free", 0.0), ("held", None)):
        tr = make_trainer(tmp_path / name, seed=0)
        _, ts = tr._load_batch({"batch_dir": d}, need_routing=True)
        p = B.pad(ts, "cpu")
        with torch.no_grad():
            old, _ = tr._logp(p.inputs, p.targets, p.routing, p.temperature)
        v, _ = tr._baseline(p.inputs, p.mask)
        adv, _ = tr._advantages(ts, v, p.mask, ppo.Hyper.from_dict({}, "small"))
        start = {k: t.clone() for k, t in tr.actor.state_dict().items()}
        if floor is None:   # between the free update's worst positive-advantage token and 1
            floor = (1 + runs["free"]["res"]["pos_ratio_min"]) / 2
        res = tr._run("ppo_step", {"key": "c/ppo/1", "batch_dir": d, "preset": "small",
                                   "hyper": {"min_pos_ratio": floor}}, tr.ppo_step)
        with torch.no_grad():
            new, _ = tr._logp(p.inputs, p.targets, p.routing, p.temperature)
        pos = (adv > 0) & p.mask
        runs[name] = {"res": res, "floor": floor, "start": start, "actor": tr.actor.state_dict(),
                      "critic": tr.critic.state_dict(), "ratio": (new - old)[pos].exp(), "lr": (new - old)[p.mask]}
    free, held = runs["free"], runs["held"]
    # The metrics are the update's, on the whole batch.
    for r in (free, held):
        assert r["res"]["pos_ratio_min"] == pytest.approx(float(r["ratio"].min()), abs=1e-5)
        lr = r["lr"].double()
        assert r["res"]["post_kl"] == pytest.approx(float((lr.exp() - 1 - lr).mean()), abs=1e-6)
    assert free["res"]["pos_ratio_min"] < 0.999, "the free update lowered no positive-advantage token: the test shows nothing"
    assert float(free["lr"].exp().min()) < free["res"]["pos_ratio_min"] - 0.01, "no token without a positive advantage fell further"
    assert free["res"]["actor_backtracks"] == 0 and free["res"]["actor_step_share"] == 1.0
    # Backtracked: the floor holds, and the actor sits on the line from its start to the free update's end.
    share = held["res"]["actor_step_share"]
    assert held["res"]["actor_backtracks"] >= 1 and share < 1
    assert held["res"]["pos_ratio_min"] >= held["floor"] or share == 0
    for k, a in held["start"].items():
        want = a + share * (free["actor"][k] - a)
        assert torch.allclose(held["actor"][k], want, atol=1e-6), k
    for k, c in free["critic"].items():
        assert torch.equal(c, held["critic"][k]), f"the backtrack moved the critic's {k}"
    with pytest.raises(ValueError, match="min_pos_ratio"):
        ppo.Hyper.from_dict({"min_pos_ratio": 1.0})
