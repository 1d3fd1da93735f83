"""The hf critic explains an early-decided return, as the reference's does
(gpu/reference/tests/test_critic.py), on the same batch written with the hf
tokenizer: a prompt with a random reference code, then the answer "hello ..."
(reward 1) or "world ..." (reward 2/7) with a fixed tail whose every token then
knows the return. After SFT (which starts the critic from the SFT policy, the
reference's sft) and a critic fit on 16 trajectories, the EV on 16 it was not
fitted on (explained_variance_before of the next fit) must reach 0.9.

The tiny Qwen3-MoE here is built at Hugging Face's initializer_range 0.02.
The routing tests' fixture uses 0.2 (tiny.ROUTING_INIT_RANGE), and a critic
started from that body memorises the fitted prompts instead of reading the
word: in sample 0.97, held out 0.46 on this batch (0.17 to -0.22 on the
all-random-token batch this test used before; docs/learning.md, "The critic").
"""
import torch

import hfmoe
import tiny as tiny_mod
from helpers import batch, make_trainer, op

REF = "abcdefghijklmnopqrstuvwxyz0123456789"
TAIL = " >/app/o and that is all, done."
WORDS = {"hello": 1.0, "world": 2 / 7}


def trajs(tok, n, seed, p_hello=0.6):
    g = torch.Generator().manual_seed(seed)
    words = ["hello" if float(torch.rand(1, generator=g)) < p_hello else "world" for _ in range(n)]
    words[0], words[1] = "hello", "world"   # both returns in every batch
    out = []
    for w in words:
        code = "".join(REF[int(i)] for i in torch.randint(len(REF), (24,), generator=g))
        prompt = tok.encode(f"<|im_start|>user\nWrite a word to /app/o. Ref: {code}<|im_end|>\n<|im_start|>assistant\n",
                            add_special_tokens=False)
        answer = tok.encode(w + TAIL + "<|im_end|>", add_special_tokens=False)
        out.append({"tokens": prompt + answer, "loss_mask": [0] * len(prompt) + [1] * len(answer),
                    "logprobs": [0.0] * (len(prompt) + len(answer))})
    return out, [WORDS[w] for w in words]


def test_fitted_hf_critic_explains_the_return_on_held_out_trajectories(tmp_path):
    ck = tiny_mod.build("qwen3_moe", str(tmp_path / "tiny"), seed=0, initializer_range=0.02)
    tok = hfmoe.load_tokenizer(ck)
    torch.manual_seed(0)
    tr = make_trainer(tmp_path / "w", ck)
    op(tr, "sft", "sft", batch(tmp_path, "sft", *trajs(tok, 16, 1, 0.5)), preset="small",
       hyper={"epochs": 4, "minibatches": 8, "actor_lr": 1e-3})
    fit = {"preset": "small", "hyper": {"epochs": 10}}
    first = op(tr, "critic_fit", "critic/1", batch(tmp_path, "a", *trajs(tok, 16, 2)), **fit)
    held = op(tr, "critic_fit", "critic/2", batch(tmp_path, "b", *trajs(tok, 16, 3)), **fit)
    ev = held["explained_variance_before"]
    print(f"hf: cold EV {first['explained_variance_before']:.3f}, fitted {first['explained_variance']:.3f}, held-out {ev:.3f}")
    assert ev >= 0.9, f"held-out explained variance {ev:.3f} < 0.9 (in sample {first['explained_variance']:.3f})"
