"""Does the whole loop learn? The write-hello family (internal/family,
docs/learning.md) in-process, without Docker or Temporal: SFT on reference
turns rendered as harness.SolutionTurns renders them, on variants that ask
for hello or, as often, for world (the SFT policy cannot tell which from the
instruction); then PPO steps on hello variants, trajectories sampled by the
reference server (routing recorded, temperature 0.7) and scored by the
family's verifier logic (file exists, each letter, the exact word; reward =
passing / 7). The resolved share of held-out hello prompts at fixed seeds
must rise by 25 points.

About ten minutes on 2 cores, so make test runs the short loop
(test_learning_short.py) and this one runs with T1FLOW_LEARNING=1.
Measured once: held-out resolved 0.33 -> 1.00, training batches 0.33 -> 0.83-1.0
(docs/learning.md).
"""
import json
import os
import re

import pytest
import torch

import model as M
from helpers import make_engine, make_trainer, routing_of, write_batch

pytestmark = pytest.mark.skipif(os.environ.get("T1FLOW_LEARNING") != "1",
                                reason="the in-process learning loop takes about ten minutes: T1FLOW_LEARNING=1 runs it")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
SYSTEM = open(os.path.join(ROOT, "harness", "action.go")).read().split("const SystemPrompt = `")[1].split("`")[0]
CONFIRM = ("Are you sure you want to mark the task as complete? Your solution will be graded and you cannot make "
           "further changes. If so, reply again with \"task_complete\": true.\n\nCurrent terminal output:\n")
WORD, SIBLING, FILE, S = "hello", "world", "/app/o", 7
TEMPERATURE = 0.7
TRAIN = ["Write the word hello to the file /app/o.", "Create the file /app/o containing the word hello.",
         "Save the text hello in /app/o.", "The file /app/o should hold the word hello.",
         "Store the word hello in the file /app/o.", "Echo hello into the file /app/o."]
HELD_OUT = ["Put hello into /app/o.", "Make /app/o contain hello."]   # templates no training prompt uses
PRE = ["", "Please: ", "Task %d: ", "Hi! "]
SUF = ["", " Use the shell.", " (ticket %d)", " Keep it short."]
tok = M.Tokenizer()


REF = "abcdefghijklmnopqrstuvwxyz0123456789"
LENGTH = 112  # family.InstructionLen: a reference code pads every instruction to it


def variants(templates, n, seed, words=(WORD,)):
    """(word, instruction) pairs worded as internal/family words them."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]
    out = []
    for i in range(n):
        w = words[i % len(words)]
        num = int(torch.randint(10, 9999, (1,), generator=g))
        text = (f"Word: {w}. " + pick(PRE) + pick(templates).replace(WORD, w) + pick(SUF)).replace("%d", str(num)) + " Ref: "
        out.append((w, text + "".join(pick(REF) for _ in range(LENGTH - len(text)))))
    return out


def prompt(instruction):
    """harness.FirstPromptPieces: template glue with specials, the observation as plain bytes."""
    obs = "Task:\n" + instruction + "\n\nCurrent terminal state:\nroot@sandbox:/app# "
    return (tok.encode("<|im_start|><|system|>" + SYSTEM + "<|im_end|><|im_start|><|user|>")
            + tok.encode(obs, allow_special=False) + tok.encode("<|im_end|><|im_start|><|assistant|>"))


def turn(cmds):
    return tok.encode(json.dumps({"commands": cmds, "task_complete": True}, separators=(",", ":")), allow_special=False) + [tok.im_end]


def sft_sample(word, instruction):
    """harness.SolutionTurns: prompt, solution turn, confirmation glue, confirming turn."""
    parts = [prompt(instruction), turn([{"keystrokes": f"echo {word} >{FILE}\n", "duration": 1}]),
             tok.encode("<|im_start|><|user|>") + tok.encode(CONFIRM, allow_special=False)
             + tok.encode("<|im_end|><|im_start|><|assistant|>"), turn([])]
    ids = [t for p in parts for t in p]
    mask = [i % 2 for i, p in enumerate(parts) for _ in p]
    return {"tokens": torch.tensor(ids, dtype=torch.int32), "loss_mask": torch.tensor(mask, dtype=torch.uint8),
            "logprobs": torch.zeros(len(ids))}


def passing(text):
    """The family's tests/test.sh on what the answer's keystrokes would leave in /app/o."""
    try:
        a = json.loads(text[text.index("{"):text.rindex("}") + 1])
        keys = "".join(c["keystrokes"] for c in a.get("commands") or [])
    except (ValueError, KeyError, TypeError, AttributeError):
        return 0
    got = None
    for line in keys.split("\n")[:-1]:
        m = re.fullmatch(r"\s*echo\s+(\S+)\s*>\s*(\S+)\s*", line)
        if m and m.group(2) in (FILE, "o", "./o"):
            got = m.group(1)
    if got is None:
        return 0
    return 1 + sum(got[i:i + 1] == WORD[i] for i in range(len(WORD))) + (got == WORD)


def sample(eng, instruction, seed):
    p = prompt(instruction)
    r = eng.generate({"input_ids": p, "return_logprob": True, "return_routed_experts": True,
                      "sampling_params": {"max_new_tokens": 96, "seed": seed, "temperature": TEMPERATURE, "stop_token_ids": [tok.im_end]}})
    out = r["output_ids"]
    traj = {"tokens": torch.tensor(p + out, dtype=torch.int32),
            "loss_mask": torch.tensor([0] * len(p) + [1] * len(out), dtype=torch.uint8),
            "logprobs": torch.tensor([0.0] * len(p) + [lp for lp, _, _ in r["meta_info"]["output_token_logprobs"]]),
            "routed_experts": routing_of(eng, r), "temperature": TEMPERATURE}
    return traj, passing(tok.decode([t for t in out if t != tok.im_end])) / S


def serve(eng, tr):
    """The inference server loads the trainer's weights, as a campaign checkpoint does."""
    d = os.path.join(tr.workdir, f"ckpt-{tr.version}")
    tr._save(d)
    eng.load(d)


def resolved_share(eng, prompts):
    """Held-out prompts at fixed seeds: the share whose every assertion passes."""
    return sum(sample(eng, p, 10_000 + i)[1] == 1.0 for i, (_, p) in enumerate(prompts)) / len(prompts)


def test_ppo_raises_the_resolved_share_on_held_out_prompts(tmp_path):
    torch.manual_seed(0)
    eng, tr = make_engine(seed=0), make_trainer(tmp_path / "w", seed=0)
    sft = variants(TRAIN, 32, 1, (WORD, SIBLING))
    train, held = variants(TRAIN, 32, 3), variants(HELD_OUT, 24, 2)
    d = write_batch(tmp_path / "sft", [sft_sample(w, i) for w, i in sft], [0.0] * len(sft), temperature=None)
    tr._run("sft", {"key": "sft", "batch_dir": d, "preset": "small",
                    "hyper": {"epochs": 6, "minibatches": 16, "actor_lr": 1e-3}}, tr.sft)
    serve(eng, tr)
    before = resolved_share(eng, held)

    def batch(step, n=12):
        out = [sample(eng, train[(step * n + i) % len(train)][1], step * 1000 + i) for i in range(n)]
        return [t for t, _ in out], [r for _, r in out]
    trajs, rewards = batch(900)   # one warm-up round for the critic
    tr._run("critic_fit", {"key": "critic/1", "batch_dir": write_batch(tmp_path / "c", trajs, rewards),
                           "preset": "small", "hyper": {"epochs": 3}}, tr.critic_fit)
    curve = []
    for step in range(1, 7):
        trajs, rewards = batch(step)
        curve.append(sum(r == 1.0 for r in rewards) / len(rewards))
        tr._run("ppo_step", {"key": f"ppo/{step}", "batch_dir": write_batch(tmp_path / f"b{step}", trajs, rewards),
                             "preset": "small"}, tr.ppo_step)
        serve(eng, tr)
    after = resolved_share(eng, held)
    print(f"held-out resolved {before:.3f} -> {after:.3f}; resolved by step {[round(c, 2) for c in curve]}")
    assert before < 0.75, f"SFT must leave room for PPO: held-out resolved {before:.3f}"
    assert after >= before + 0.25, f"PPO did not raise the held-out resolved share: {before:.3f} -> {after:.3f} (steps {curve})"
