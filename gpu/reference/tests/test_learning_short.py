"""Does the loop learn? The shortest loop that can show it, in seconds:
sample with the inference engine (routing recorded, temperature 1), score
each answer with a verifier, train a PPO step on the sampled tokens (R3 replay,
the critic as the only baseline), load the new weights into the engine, again.

The task is a two-armed bandit in the harness's chat format: SFT on an even
mix of the answers "yes" and "no" leaves a policy that says each about half
the time; the verifier pays 1 for "yes". After a few PPO steps the policy must
say "yes" far more often. The measure is exact, not sampled: the actor's
probability of the first answer token being "y", so the test does not rest on
sampling luck.

It fails (checked by trying each, docs/learning.md) when
  the advantage's sign is flipped            (P(y) falls)
  the loss mask is shifted by one            (the decision token is not trained)
  rewards are dropped or constant            (no signal: P(y) stays put)
The full campaign on a harness task family is `make demo`.
"""
import os

import torch

import model as M
from helpers import make_engine, make_trainer, routing_of, write_batch

tok = M.Tokenizer()
PROMPT = tok.encode("<|im_start|><|user|>") + tok.encode("Answer yes or no.", allow_special=False) \
    + tok.encode("<|im_end|><|im_start|><|assistant|>")
YES = tok.encode("yes", allow_special=False)[0]


def sft_sample(answer):
    out = tok.encode(answer, allow_special=False) + [tok.im_end]
    return {"tokens": torch.tensor(PROMPT + out, dtype=torch.int32),
            "loss_mask": torch.tensor([0] * len(PROMPT) + [1] * len(out), dtype=torch.uint8),
            "logprobs": torch.zeros(len(PROMPT) + len(out))}


def sample(eng, seed):
    r = eng.generate({"input_ids": PROMPT, "return_logprob": True, "return_routed_experts": True,
                      "sampling_params": {"max_new_tokens": 6, "seed": seed, "temperature": 1.0,
                                          "stop_token_ids": [tok.im_end]}})
    out = r["output_ids"]
    traj = {"tokens": torch.tensor(PROMPT + out, dtype=torch.int32),
            "loss_mask": torch.tensor([0] * len(PROMPT) + [1] * len(out), dtype=torch.uint8),
            "logprobs": torch.tensor([0.0] * len(PROMPT) + [lp for lp, _, _ in r["meta_info"]["output_token_logprobs"]]),
            "routed_experts": routing_of(eng, r), "temperature": 1.0}
    answer = tok.decode([t for t in out if t != tok.im_end])
    return traj, 1.0 if answer == "yes" else 0.0


def p_yes(tr):
    """The actor's probability that the answer starts with "y" (its own routing, no sampling)."""
    with torch.no_grad():
        logits, _ = tr.actor(torch.tensor([PROMPT]))
    return float(torch.softmax(logits[0, -1].float(), -1)[YES])


def serve(eng, tr):
    d = os.path.join(tr.workdir, f"ckpt-{tr.version}")
    tr._save(d)
    eng.load(d)


def run_loop(tmp_path, steps=5, per_step=16):
    torch.manual_seed(0)
    eng, tr = make_engine(seed=0), make_trainer(tmp_path / "w", seed=0)
    mix = [sft_sample("yes" if i % 2 else "no") for i in range(16)]
    tr._run("sft", {"key": "sft", "batch_dir": write_batch(tmp_path / "sft", mix, [0.0] * 16, temperature=None),
                    "preset": "small", "hyper": {"epochs": 6, "minibatches": 4, "actor_lr": 1e-3}}, tr.sft)
    serve(eng, tr)
    before, curve = p_yes(tr), []
    for step in range(steps):
        batch = [sample(eng, 1000 * step + i) for i in range(per_step)]
        rewards = [r for _, r in batch]
        curve.append(sum(rewards) / per_step)
        d = write_batch(tmp_path / f"b{step}", [t for t, _ in batch], rewards)
        tr._run("ppo_step", {"key": f"ppo/{step}", "batch_dir": d, "preset": "small"}, tr.ppo_step)
        serve(eng, tr)
    return before, p_yes(tr), curve


def test_ppo_steps_raise_the_rewarded_answer(tmp_path):
    before, after, curve = run_loop(tmp_path)
    print(f"P(yes) {before:.3f} -> {after:.3f}; reward by step {curve}")
    assert 0.2 < before < 0.8, f"SFT on an even mix must leave the choice open: P(yes) = {before:.3f}"
    assert after > before + 0.25, f"PPO did not learn the rewarded answer: P(yes) {before:.3f} -> {after:.3f} (rewards {curve})"
    assert after > 0.75, f"P(yes) after PPO: {after:.3f}"
