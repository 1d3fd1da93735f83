"""Does the whole loop learn? The write-hello family (internal/family,
docs/learning.md) in-process: SFT on reference turns rendered as
harness.SolutionTurns renders them, then PPO steps on trajectories the server
sampled (routing recorded, temperature 1), each scored by the family's
verifier logic (file exists, each letter, the exact word; reward = passing / 7).
The mean reward of a fixed set of held-out prompts at fixed seeds must rise.
A flipped advantage sign, a loss on the wrong tokens or stale log-probs make
it fall or stay flat.

Fifteen minutes on 2 shared cores, and it FAILS today: measured once, held-out
mean reward 0.250 -> 0.250, training reward by step 0, .375, .25, .375, .25, .375
(docs/learning.md). Until the loop learns reliably it runs only when asked,
with T1FLOW_LEARNING=1, and make test does not ask.
"""
import json
import os
import re

import pytest
import torch

import model as M
from helpers import make_engine, make_trainer, routing_of, write_batch

pytestmark = pytest.mark.skipif(os.environ.get("T1FLOW_LEARNING") != "1",
                                reason="the learning loop takes minutes and does not pass yet: T1FLOW_LEARNING=1 runs it")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
SYSTEM = open(os.path.join(ROOT, "harness", "action.go")).read().split("const SystemPrompt = `")[1].split("`")[0]
CONFIRM = ("Are you sure you want to mark the task as complete? Your solution will be graded and you cannot make "
           "further changes. If so, reply again with \"task_complete\": true.\n\nCurrent terminal output:\n")
WORD, FILE, S = "hello", "/app/o", 7
TRAIN = ["Write the word hello to the file /app/o.", "Create the file /app/o containing the word hello.",
         "Save the text hello in /app/o.", "The file /app/o should hold the word hello.",
         "Store the word hello in the file /app/o.", "Echo hello into the file /app/o."]
HELD_OUT = ["Put hello into /app/o.", "Make /app/o contain hello."]   # templates no training prompt uses
PRE = ["", "Please: ", "Task %d: ", "Hi! "]
SUF = ["", " Use the shell.", " (ticket %d)", " Keep it short."]
tok = M.Tokenizer()


REF = "abcdefghijklmnopqrstuvwxyz0123456789"
LENGTH = 96   # family.InstructionLen: a reference code pads every instruction to it


def variants(templates, n, seed):
    g = torch.Generator().manual_seed(seed)
    pick = lambda xs: xs[int(torch.randint(len(xs), (1,), generator=g))]
    out = []
    for _ in range(n):
        num = int(torch.randint(10, 9999, (1,), generator=g))
        text = (pick(PRE) + pick(templates) + pick(SUF)).replace("%d", str(num)) + " Ref: "
        out.append(text + "".join(pick(REF) for _ in range(LENGTH - len(text))))
    return out


def prompt(instruction):
    """harness.FirstPromptPieces: template glue with specials, the observation as plain bytes."""
    obs = "Task:\n" + instruction + "\n\nCurrent terminal state:\nroot@sandbox:/app# "
    return (tok.encode("<|im_start|><|system|>" + SYSTEM + "<|im_end|><|im_start|><|user|>")
            + tok.encode(obs, allow_special=False) + tok.encode("<|im_end|><|im_start|><|assistant|>"))


def turn(cmds):
    return tok.encode(json.dumps({"commands": cmds, "task_complete": True}, separators=(",", ":")), allow_special=False) + [tok.im_end]


def sft_sample(instruction):
    """harness.SolutionTurns: prompt, solution turn, confirmation glue, confirming turn."""
    parts = [prompt(instruction), turn([{"keystrokes": f"echo {WORD} >{FILE}\n", "duration": 1}]),
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
                      "sampling_params": {"max_new_tokens": 96, "seed": seed, "temperature": 1.0, "stop_token_ids": [tok.im_end]}})
    out = r["output_ids"]
    traj = {"tokens": torch.tensor(p + out, dtype=torch.int32),
            "loss_mask": torch.tensor([0] * len(p) + [1] * len(out), dtype=torch.uint8),
            "logprobs": torch.tensor([0.0] * len(p) + [lp for lp, _, _ in r["meta_info"]["output_token_logprobs"]]),
            "routed_experts": routing_of(eng, r), "temperature": 1.0}
    return traj, passing(tok.decode([t for t in out if t != tok.im_end])) / S


def serve(eng, tr):
    """The inference server loads the trainer's weights, as a campaign checkpoint does."""
    d = os.path.join(tr.workdir, f"ckpt-{tr.version}")
    tr._save(d)
    eng.load(d)


def held_out_reward(eng, prompts):
    return sum(sample(eng, p, 10_000 + i)[1] for i, p in enumerate(prompts)) / len(prompts)


def test_ppo_raises_reward_on_held_out_prompts(tmp_path):
    torch.manual_seed(0)
    eng, tr = make_engine(seed=0), make_trainer(tmp_path / "w", seed=0)
    train, held = variants(TRAIN, 32, 1), variants(HELD_OUT, 12, 2)
    d = write_batch(tmp_path / "sft", [sft_sample(i) for i in train], [0.0] * len(train), temperature=None)
    tr._run("sft", {"key": "sft", "batch_dir": d, "preset": "small",
                    "hyper": {"epochs": 4, "minibatches": 16, "actor_lr": 1e-3}}, tr.sft)
    serve(eng, tr)
    before = held_out_reward(eng, held)
    curve = []
    for step in range(1, 7):
        trajs, rewards = [], []
        for i in range(8):
            t, r = sample(eng, train[(step * 8 + i) % len(train)], step * 100 + i)
            trajs.append(t)
            rewards.append(r)
        curve.append(sum(rewards) / len(rewards))
        tr._run("ppo_step", {"key": f"ppo/{step}", "batch_dir": write_batch(tmp_path / f"b{step}", trajs, rewards),
                             "preset": "small"}, tr.ppo_step)
        serve(eng, tr)
    after = held_out_reward(eng, held)
    print(f"held-out mean reward {before:.3f} -> {after:.3f}; training reward by step {[round(c, 3) for c in curve]}")
    assert 0 < before < 0.95, f"SFT must leave room for PPO: held-out reward {before:.3f}"
    assert after >= before + 0.1, f"PPO did not raise the held-out reward: {before:.3f} -> {after:.3f} (steps {curve})"
