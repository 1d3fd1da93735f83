"""R3 on HF MoE models: with each MoE layer forced to the sampler's recorded
experts the trainer's log-probs are the sampler's at float noise; when the
sampler routed differently (router noise, or an expert swapped in the record)
and nothing is replayed, they are clearly not."""
import pytest
import torch

import batch as B
from helpers import batch, make_trainer, rollouts


def padded(tr, batch_dir):
    _, trajs = tr._load_batch({"batch_dir": batch_dir}, need_routing=True)
    return B.pad(trajs, tr.device)


@pytest.mark.parametrize("arch", ["qwen3_moe", "olmoe", "mixtral"])
def test_replay_gap_is_float_noise_and_free_routing_is_not(arch, engines, tiny, tmp_path):
    # The sampler's router is noisy (an inference engine routing differently
    # from the trainer); two turns, so the second reuses the prefix cache.
    eng = engines(arch, router_jitter=1.0)
    trajs = rollouts(eng, n=2, max_new=8, turns=2, temperature=0.8)
    tr = make_trainer(tmp_path / "w", tiny(arch))
    p = padded(tr, batch(tmp_path, "b", trajs))
    g = tr.logprob_gaps(p)
    assert float(g["gap_replay"].max()) < 1e-4, f"{arch}: replayed routing must reproduce the sampler's log-probs"
    assert bool(g["flips"].any()), "the noisy sampler routed some loss token differently"
    assert float(g["gap_free"].max()) > 1e-2, f"{arch}: without replay the gap must show"


def test_a_swapped_expert_in_the_record_changes_the_replayed_logprob(engines, tiny, tmp_path):
    eng = engines("olmoe")
    trajs = rollouts(eng, n=1, max_new=8)
    tr = make_trainer(tmp_path / "w", tiny("olmoe"))
    p = padded(tr, batch(tmp_path, "b", trajs))
    assert float(tr.logprob_gaps(p)["gap_replay"].max()) < 1e-4
    j = int(p.mask[0].nonzero()[-1])     # the last loss position
    row = p.routing[0, j, 0]
    unused = next(e for e in range(tr.actor.t1_routing.n_experts) if e not in row.tolist())
    p.routing[0, j, 0, 0] = unused        # layer 0 of that position: another expert
    g = tr.logprob_gaps(p)
    gap = (g["replayed"] - p.sampler_logp)[0]
    assert float(gap[j].abs()) > 1e-3, "the replayed experts are the record's"
    assert float(gap[:j][p.mask[0, :j]].abs().max()) < 1e-4, "earlier positions are unaffected"


def test_gradient_checkpointing_replays_the_same_experts_in_backward(engines, tiny, tmp_path):
    """Checkpointing re-runs each layer's forward in backward: it must route
    by the record there too, or the gradients are of another network."""
    eng = engines("qwen3_moe", router_jitter=1.0)
    b = batch(tmp_path, "b", rollouts(eng, n=2, max_new=8, temperature=0.8))
    grads = []
    for ckpt in (False, True):
        tr = make_trainer(tmp_path / f"w{ckpt}", tiny("qwen3_moe"), *(["--gradient-checkpointing"] if ckpt else []))
        p = padded(tr, b)
        tr.actor.train()
        logp, _ = tr._logp(p.inputs, p.targets, p.routing, p.temperature)
        (-logp[p.mask].sum()).backward()
        grads.append(torch.cat([q.grad.flatten() for q in tr.actor.parameters() if q.grad is not None]))
    assert tr.actor.is_gradient_checkpointing
    assert grads[0].shape == grads[1].shape
    assert float((grads[0] - grads[1]).abs().max()) < 1e-4 * float(grads[0].abs().max())
