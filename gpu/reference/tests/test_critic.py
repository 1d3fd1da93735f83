"""Does the critic explain the return? A batch whose return is decided by an
early token: the answer is "hello ..." (reward 1) or "world ..." (reward 2/7,
as the write-hello verifier pays a wrong word), followed by a fixed tail whose
every token then knows the return. After SFT on the answers' format and a
critic fit on one batch, the critic's explained variance on trajectories it
was not fitted on (the next critic_fit's explained_variance_before) must
reach 0.9 (the ceiling here is about 0.97: only the value before the first
answer token cannot know the word).

It failed before the critic was started from the SFT policy: the critic was
the random init's body, which SFT never trains (docs/learning.md).
"""
import torch

import model as M
import ppo
from helpers import make_trainer, write_batch

tok = M.Tokenizer()
REF = "abcdefghijklmnopqrstuvwxyz0123456789"
TAIL = " >/app/o and that is all, done."
WORDS = {"hello": 1.0, "world": 2 / 7}


def trajectory(g, word, answer_of=lambda w: w + TAIL):
    """A prompt with a random reference code (so no two prompts are equal),
    then the answer as loss tokens."""
    code = "".join(REF[int(i)] for i in torch.randint(len(REF), (24,), generator=g))
    prompt = (tok.encode("<|im_start|><|user|>") + tok.encode(f"Write a word to /app/o. Ref: {code}", allow_special=False)
              + tok.encode("<|im_end|><|im_start|><|assistant|>"))
    answer = tok.encode(answer_of(word), allow_special=False) + [tok.im_end]
    ids = prompt + answer
    return {"tokens": torch.tensor(ids, dtype=torch.int32),
            "loss_mask": torch.tensor([0] * len(prompt) + [1] * len(answer), dtype=torch.uint8),
            "logprobs": torch.zeros(len(ids))}


def batch(tmp_path, name, n, seed, p_hello=0.6, answer_of=lambda w: w + TAIL):
    g = torch.Generator().manual_seed(seed)
    words = ["hello" if float(torch.rand(1, generator=g)) < p_hello else "world" for _ in range(n)]
    words[0], words[1] = "hello", "world"   # both returns in every batch
    trajs = [trajectory(g, w, answer_of) for w in words]
    return write_batch(tmp_path / name, trajs, [WORDS[w] for w in words], temperature=None)


def sft_then_fit(tmp_path, answer_of=lambda w: w + TAIL, fit_epochs=10):
    torch.manual_seed(0)
    tr = make_trainer(tmp_path / "w", seed=0)
    sft = batch(tmp_path, "sft", 16, 1, p_hello=0.5, answer_of=answer_of)
    tr._run("sft", {"key": "sft", "batch_dir": sft, "preset": "small",
                    "hyper": {"epochs": 4, "minibatches": 8, "actor_lr": 1e-3}}, tr.sft)
    fit = {"preset": "small", "hyper": {"epochs": fit_epochs}}
    a = batch(tmp_path, "a", 16, 2, answer_of=answer_of)
    first = tr._run("critic_fit", {"key": "critic/1", "batch_dir": a, **fit}, tr.critic_fit)
    # Round 2 as a warm-up sends it: its new rollouts, and round 1's marked seen.
    both = pool(tmp_path / "ab", seen=a, new=batch(tmp_path, "b", 16, 3, answer_of=answer_of))
    held = tr._run("critic_fit", {"key": "critic/2", "batch_dir": both, **fit}, tr.critic_fit)
    return tr, first, held


def pool(d, seen, new):
    """One batch directory of new's trajectories and seen's, marked seen."""
    import json
    d.mkdir()
    entries = []
    for src, is_seen in ((seen, True), (new, False)):
        for e in json.load(open(f"{src}/meta.json"))["trajectories"]:
            name = f"{'s' if is_seen else 'n'}-{e['file']}"
            (d / name).write_bytes(open(f"{src}/{e['file']}", "rb").read())
            entries.append({**e, "file": name, "seen": is_seen})
    (d / "meta.json").write_text(json.dumps({"trajectories": entries}))
    return str(d)


def test_fitted_critic_explains_the_return_on_held_out_trajectories(tmp_path):
    tr, first, held = sft_then_fit(tmp_path)
    ev, top = held["explained_variance_before"], held["ceiling_ev_before"]
    print(f"cold EV {first['explained_variance_before']:.3f}, fitted {first['explained_variance']:.3f}, held-out {ev:.3f}, answer-prefix ceiling {top:.3f}")
    assert ev >= 0.9, f"held-out explained variance {ev:.3f} < 0.9 (cold {first['explained_variance_before']:.3f}, in sample {first['explained_variance']:.3f})"
    assert 0.95 <= top < 1, f"the answer-prefix ceiling {top:.3f}: only the value before the word cannot know it"


def action(word):
    """The write-hello family's answer (docs/learning.md): the word comes 33 tokens in."""
    return '{"commands":[{"keystrokes":"echo %s >/app/o\\n","duration":1}],"task_complete":true}' % word


def test_critic_explains_a_return_decided_mid_answer_in_the_demos_fit(tmp_path):
    """The demo's case: the word is decided 33 tokens into an 87-token answer,
    and every token after it is the same for both words, so a language
    model's state there no longer holds the word. The critic must still
    explain the return on held-out trajectories after the demo's own fit
    (learn.toml's fit_epochs = 5). The ceiling is about 0.6: the 34 values up
    to the word's first letter cannot know it. Before the value head read the
    response's mean and was solved by least squares, held-out EV here was
    0.04 (in sample 0.13); with both, 0.44; with the running max in place
    of the mean, 0.485 (docs/learning.md)."""
    tr, first, held = sft_then_fit(tmp_path, action, fit_epochs=5)
    ev, top = held["explained_variance_before"], held["ceiling_ev_before"]
    print(f"cold EV {first['explained_variance_before']:.3f}, fitted {first['explained_variance']:.3f}, held-out {ev:.3f}, answer-prefix ceiling {top:.3f}")
    # 34 of 88 values come before the word and cannot know it: about 54/88 is left to explain.
    assert 0.55 <= top <= 0.65, f"the answer-prefix ceiling {top:.3f} is not the family's 54/88"
    assert ev >= 0.46, f"held-out explained variance {ev:.3f} < 0.46 (in sample {first['explained_variance']:.3f})"


def test_held_out_ev_leaves_out_the_seen_trajectories(tmp_path):
    """A warm-up round fits on every round's rollouts so far, the earlier
    ones marked seen: explained_variance_before is the starting critic's on
    the new ones alone, the same number a fit on those alone reports, and a
    batch with nothing held out is refused."""
    import json
    import httpjson
    import pytest
    fit = {"preset": "small", "hyper": {"epochs": 1}}
    # The seen rounds' answers decide the word 33 tokens in (ceiling about 0.6), the new round's at once (about 0.97).
    old, new = batch(tmp_path, "old", 8, 5, p_hello=0.9, answer_of=action), batch(tmp_path, "new", 8, 6, p_hello=0.2)
    both = tmp_path / "both"
    pool(both, seen=old, new=new)
    entries = json.load(open(both / "meta.json"))["trajectories"]
    results = {}
    for name, d in (("new", new), ("old", old), ("both", both)):
        torch.manual_seed(0)
        tr = make_trainer(tmp_path / f"w-{name}", seed=0)
        results[name] = tr._run("critic_fit", {"key": "c", "batch_dir": str(d), **fit}, tr.critic_fit)
    b, n, o = (results[k]["explained_variance_before"] for k in ("both", "new", "old"))
    assert results["both"]["held_out"] == 8 and results["both"]["trajectories"] == 16
    assert abs(b - n) < 1e-5 and abs(b - o) > 1e-3, f"EV before: pooled {b}, new alone {n}, seen alone {o}"
    b, n, o = (results[k]["ceiling_ev_before"] for k in ("both", "new", "old"))
    assert abs(b - n) < 1e-6 and abs(b - o) > 0.2, f"ceiling: pooled {b}, new alone {n}, seen alone {o}"
    for op in ("sft", "ppo_step"):   # before ppo_step reads the routing this batch lacks
        with pytest.raises(httpjson.HTTPError, match=r"trajectories\[0\]\.seen is for critic_fit only"):
            tr._run(op, {"key": f"x-{op}", "batch_dir": str(both), **fit}, getattr(tr, op))
    for e in entries:
        e["seen"] = True
    (both / "meta.json").write_text(json.dumps({"trajectories": entries}))
    torch.manual_seed(0)
    tr = make_trainer(tmp_path / "w-all", seed=0)
    with pytest.raises(httpjson.HTTPError, match="nothing is held out"):
        tr._run("critic_fit", {"key": "c", "batch_dir": str(both), **fit}, tr.critic_fit)


def test_critics_saved_before_the_max_pool_still_read_the_mean(tmp_path):
    """A critic made now pools the response by its running max and saves
    that in its config; one saved before value_pool_op existed loads as the
    mean-pooled critic it was trained as (same weights, same values)."""
    import json
    import os
    torch.manual_seed(0)
    tr = make_trainer(tmp_path / "w", seed=0)
    assert tr.critic.cfg.value_pool_op == "max"
    M.save_checkpoint(tr.critic, str(tmp_path / "c"), "critic")
    cfg_path = os.path.join(tmp_path, "c", "critic.json")
    saved = json.load(open(cfg_path))
    assert saved["value_pool_op"] == "max"
    ids = torch.tensor([tok.encode("<|im_start|><|user|>hi<|im_end|><|im_start|><|assistant|>echo hello")])
    del saved["value_pool_op"]
    json.dump(saved, open(cfg_path, "w"))
    old, _ = M.load_checkpoint(str(tmp_path / "c"), "critic")
    assert old.cfg.value_pool_op == "mean"
    with torch.no_grad():
        h, _ = old.hidden(ids)
        want = old.head(M.pool_response(ids, h, "mean")).squeeze(-1)
        assert torch.allclose(old(ids)[0], want)
        assert not torch.allclose(old(ids)[0], tr.critic.cpu()(ids)[0])
    import pytest
    with pytest.raises(ValueError, match="value_pool_op"):
        M.pool_response(ids, h, "median")
