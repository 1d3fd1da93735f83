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
import pytest
import torch

import hfmoe
import trainer as T
import tiny as tiny_mod
from helpers import batch, make_trainer, op

REF = "abcdefghijklmnopqrstuvwxyz0123456789"
TAIL = " >/app/o and that is all, done."
WORDS = {"hello": 1.0, "world": 2 / 7}


def trajs(tok, n, seed, p_hello=0.6, answer_of=lambda w: w + TAIL):
    g = torch.Generator().manual_seed(seed)
    words = ["hello" if float(torch.rand(1, generator=g)) < p_hello else "world" for _ in range(n)]
    words[0], words[1] = "hello", "world"   # both returns in every batch
    out = []
    for w in words:
        code = "".join(REF[int(i)] for i in torch.randint(len(REF), (24,), generator=g))
        prompt = tok.encode(f"<|im_start|>user\nWrite a word to /app/o. Ref: {code}<|im_end|>\n<|im_start|>assistant\n",
                            add_special_tokens=False)
        answer = tok.encode(answer_of(w) + "<|im_end|>", add_special_tokens=False)
        out.append({"tokens": prompt + answer, "loss_mask": [0] * len(prompt) + [1] * len(answer),
                    "logprobs": [0.0] * (len(prompt) + len(answer))})
    return out, [WORDS[w] for w in words]


def sft_then_fit(tmp_path, fit_epochs, answer_of=lambda w: w + TAIL):
    """SFT on the format, then critic fits on two fresh batches of 16: the
    first fit's result and the second's (whose explained_variance_before is
    the EV on 16 trajectories the critic was not fitted on)."""
    ck = tiny_mod.build("qwen3_moe", str(tmp_path / "tiny"), seed=0, initializer_range=0.02)
    tok = hfmoe.load_tokenizer(ck)
    torch.manual_seed(0)
    tr = make_trainer(tmp_path / "w", ck)
    op(tr, "sft", "sft", batch(tmp_path, "sft", *trajs(tok, 16, 1, 0.5, answer_of)), preset="small",
       hyper={"epochs": 4, "minibatches": 8, "actor_lr": 1e-3})
    fit = {"preset": "small", "hyper": {"epochs": fit_epochs}}
    first = op(tr, "critic_fit", "critic/1", batch(tmp_path, "a", *trajs(tok, 16, 2, answer_of=answer_of)), **fit)
    held = op(tr, "critic_fit", "critic/2", batch(tmp_path, "b", *trajs(tok, 16, 3, answer_of=answer_of)), **fit)
    ev = held["explained_variance_before"]
    print(f"hf, {fit_epochs} fit epochs: cold EV {first['explained_variance_before']:.3f}, "
          f"fitted {first['explained_variance']:.3f}, held-out {ev:.3f}")
    return tr, first, held


def test_fitted_hf_critic_explains_the_return_on_held_out_trajectories(tmp_path):
    _, first, held = sft_then_fit(tmp_path, 10)
    ev = held["explained_variance_before"]
    assert ev >= 0.9, f"held-out explained variance {ev:.3f} < 0.9 (in sample {first['explained_variance']:.3f})"


def test_hf_critic_explains_an_early_return_in_the_campaigns_fit(tmp_path):
    """The same batch after the campaigns' own fit (fit_epochs = 5 in every
    examples/campaigns/*.toml): 20 Adam steps at the small preset's 1e-3. The
    value head reading h_t alone and fitted by those steps reached 0.86 held
    out here; with the response's mean beside h_t and the head solved by
    ridge least squares after the epochs (trainer.Critic,
    reference.Trainer._solve_value_head) it must reach 0.9."""
    _, first, held = sft_then_fit(tmp_path, 5)
    ev = held["explained_variance_before"]
    assert ev >= 0.9, f"held-out explained variance {ev:.3f} < 0.9 (in sample {first['explained_variance']:.3f})"


def action(word):
    """The write-hello family's answer (docs/learning.md): the word comes well into it."""
    return '{"commands":[{"keystrokes":"echo %s >/app/o\\n","duration":1}],"task_complete":true}' % word


def test_hf_critic_explains_a_return_decided_mid_answer_in_the_campaigns_fit(tmp_path):
    """As gpu/reference/tests/test_critic.py's test of the same name: the
    word is decided a dozen tokens into the demo's answer and every token
    after it is the same for both words, so the policy's state there need not
    hold it; the 8 values up to the word (of about 42) cannot know it, so the
    ceiling is near 0.8. Before the fix 0.457 held out (in sample 0.700)."""
    _, first, held = sft_then_fit(tmp_path, 5, action)
    ev = held["explained_variance_before"]
    assert ev >= 0.6, f"held-out explained variance {ev:.3f} < 0.6 (in sample {first['explained_variance']:.3f})"


def test_a_critic_saved_before_the_response_mean_still_loads(tiny, tmp_path):
    """critic.safetensors from before the value head read the response mean
    (value_head hidden_size wide) loads as a critic reading h_t alone, with
    the values it had; a head of any other width is refused naming the file."""
    from safetensors.torch import load_file, save_file

    ck = tiny("qwen3_moe")
    tr = make_trainer(tmp_path / "w", ck)
    assert tr.critic.pool and tr.critic.value_head.weight.shape[-1] == 2 * tr.critic.backbone.config.hidden_size
    old = tmp_path / "old"
    tr._save(str(old))
    path = old / T.CRITIC_FILE
    sd = load_file(str(path))
    H = tr.critic.backbone.config.hidden_size
    sd["value_head.weight"] = torch.randn(1, H)   # the old head: h_t alone
    del sd[T.POOL_MAX_MARK]                        # saved before the max (and its marker) existed
    save_file(sd, str(path))
    tr._load(str(old))
    assert not tr.critic.pool
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        h = tr.critic.backbone(input_ids=ids).last_hidden_state
        want = (h @ sd["value_head.weight"].T).squeeze(-1) + sd["value_head.bias"]
        assert torch.allclose(tr._values(ids), want, atol=1e-5)
    sd["value_head.weight"] = torch.randn(1, 3 * H)
    save_file(sd, str(path))
    with pytest.raises(ValueError, match=T.CRITIC_FILE):
        tr._load(str(old))


def test_the_critic_reads_the_running_max_and_its_files_say_so(tiny, tmp_path):
    """Every critic made now reads [h_t, running max of h over the response]
    (as the reference's), and its saved state carries the marker
    value_pool_max, so it reloads as max; a pooled critic saved without the
    marker (before the max) reloads reading the mean it was trained with."""
    from safetensors.torch import load_file, save_file

    ck = tiny("qwen3_moe")
    tr = make_trainer(tmp_path / "w", ck)
    assert tr.critic.pool and tr.critic.op == "max"
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    with torch.no_grad():
        h = tr.critic.backbone(input_ids=ids).last_hidden_state.float()
        x = tr._value_features(ids, mask)
    C = h.shape[-1]
    assert torch.allclose(x[0, :, :C], h[0], atol=1e-5)
    assert torch.equal(x[0, :2, C:], torch.zeros(2, C))   # before the response: nothing
    assert torch.allclose(x[0, 2:, C:], torch.cummax(h[0, 2:], 0).values, atol=1e-5)
    assert not torch.allclose(x[0, 3:, C:], torch.cumsum(h[0, 2:], 0)[1:] / torch.arange(2, 5)[:, None], atol=1e-3)

    saved = tmp_path / "saved"
    tr._save(str(saved))
    sd = load_file(str(saved / T.CRITIC_FILE))
    assert T.POOL_MAX_MARK in sd
    with torch.no_grad():
        want = tr._values(ids, mask=mask)
    tr._load(str(saved))
    assert tr.critic.op == "max"
    with torch.no_grad():
        assert torch.allclose(tr._values(ids, mask=mask), want, atol=1e-5)

    del sd[T.POOL_MAX_MARK]   # a pooled critic from before the max
    save_file(sd, str(saved / T.CRITIC_FILE))
    tr._load(str(saved))
    assert tr.critic.op == "mean" and T.POOL_MAX_MARK not in tr.critic.state_dict()
    with torch.no_grad():
        x = tr._value_features(ids, mask)
    assert torch.allclose(x[0, 2:, C:], torch.cumsum(h[0, 2:], 0) / torch.arange(1, 5)[:, None], atol=1e-4)


def test_the_critic_keeps_the_range_of_its_returns_and_clips_to_it(tiny, tmp_path):
    """As the reference's (gpu/reference/tests/test_value_range.py): a fit
    sets the critic's value range, critic.safetensors keeps it, a critic
    saved before it loads as not fitted, and a baseline above every fitted
    return is clipped to the greatest (a constant: explained variance 0)."""
    from safetensors.torch import load_file, save_file
    import model as M   # gpu/reference

    ck = tiny("qwen3_moe")
    tok = hfmoe.load_tokenizer(ck)
    tr = make_trainer(tmp_path / "w", ck)
    assert tr._range_out() is None
    d = batch(tmp_path, "a", *trajs(tok, 6, 2))
    res = op(tr, "critic_fit", "critic/1", d, preset="small", hyper={"epochs": 1})
    assert res["value_range"] == pytest.approx([2 / 7, 1.0], abs=1e-6)
    saved = tmp_path / "saved"
    tr._save(str(saved))
    sd = load_file(str(saved / T.CRITIC_FILE))
    assert sd[M.VALUE_RANGE].tolist() == pytest.approx([2 / 7, 1.0], abs=1e-6)
    with torch.no_grad():
        tr.critic.value_head.bias += 10.0
    _, ts = tr._load_batch({"batch_dir": d}, need_routing=False)
    import batch as B   # gpu/reference
    p = B.pad(ts, "cpu")
    v, clipped = tr._baseline(p.inputs, p.mask)
    assert clipped == 1.0 and torch.allclose(v[p.mask], torch.full_like(v[p.mask], float(res["value_range"][1])))
    del sd[M.VALUE_RANGE]   # a critic from before the range
    save_file(sd, str(saved / T.CRITIC_FILE))
    tr._load(str(saved))
    assert tr._range_out() is None
    v, clipped = tr._baseline(p.inputs, p.mask)
    assert clipped == 0.0
