import base64
import json
import os
import types

import numpy as np
import torch

import model as M
import safetensors_io
import server
import trainer as T


def make_engine(seed=0, sample_dtype="float32", jitter=0.0, drop=0.0, model_dir=None, state=None, radix_cache=True,
                cache_tokens=1 << 16):
    args = types.SimpleNamespace(model=model_dir, seed=seed, device="cpu", sample_dtype=sample_dtype,
                                 router_jitter=jitter, drop_routing_frac=drop, fault_seed=1, state=state,
                                 disable_radix_cache=not radix_cache, prefix_cache_tokens=cache_tokens)
    return server.Engine(args)


def make_trainer(workdir, seed=0, init="random", slow_ms=0):
    args = types.SimpleNamespace(workdir=str(workdir), init=init, seed=seed, device="cpu", slow_ms=slow_ms)
    return T.Trainer(args)


def routing_of(engine, r):
    """meta_info.routed_experts decoded to (positions, layers, top_k)."""
    cfg = engine.model.cfg
    raw = np.frombuffer(base64.b64decode(r["meta_info"]["routed_experts"]), dtype=np.int32)
    return torch.from_numpy(raw.reshape(-1, cfg.n_layer, cfg.top_k).astype("uint8"))


def rollout(engine, prompt, max_new=24, seed=0, temperature=1.0):
    """One sampled trajectory in the batch format: prompt tokens are context, generated tokens are loss tokens."""
    return episode(engine, prompt, turns=1, max_new=max_new, seed=seed, temperature=temperature)


def episode(engine, prompt, turns=3, max_new=12, seed=0, temperature=1.0, output=""):
    """A multi-turn trajectory built as the Go harness builds it: each turn sends
    the whole token history, asks for routing from the first position not yet
    covered, and appends masked observation glue (tokenized with special-token
    parsing off for the observation; `output` pads it). Returns the batch tensors plus "turns", the
    (start, end) token span each turn generated."""
    tokens, mask, logp, routes, spans = list(prompt), [0] * len(prompt), [0.0] * len(prompt), [], []
    covered = 0   # positions whose routing the trajectory holds
    for i in range(turns):
        r = engine.generate({"input_ids": tokens, "return_logprob": True, "return_routed_experts": True,
                             "routed_experts_start_len": covered,
                             "sampling_params": {"max_new_tokens": max_new, "seed": seed * 1000 + i, "temperature": temperature,
                                                 "stop_token_ids": []}})
        out = r["output_ids"]
        spans.append((len(tokens), len(tokens) + len(out)))
        tokens += out
        mask += [1] * len(out)
        logp += [lp for lp, _, _ in r["meta_info"]["output_token_logprobs"]]
        routes.append(routing_of(engine, r))
        covered = len(tokens) - 1   # T-1 rows: the last sampled token has none
        if i + 1 < turns:
            glue = (engine.tokenize({"text": "<|im_end|><|im_start|><|user|>"})["tokens"]
                    + engine.tokenize({"text": f"$ ls\nfile{i}.txt <|im_end|>\n{output}", "split_special_tokens": True})["tokens"]
                    + engine.tokenize({"text": "<|im_end|><|im_start|><|assistant|>"})["tokens"])
            tokens += glue
            mask += [0] * len(glue)
            logp += [0.0] * len(glue)
    return {"tokens": torch.tensor(tokens, dtype=torch.int32), "loss_mask": torch.tensor(mask, dtype=torch.uint8),
            "logprobs": torch.tensor(logp, dtype=torch.float32), "routed_experts": torch.cat(routes),
            "turns": spans, "temperature": temperature}


def write_batch(d, trajs, rewards, temperature="sampled"):
    """A batch directory. meta.json's temperature: the one each trajectory was
    sampled at, or the value given, or none (None: the trainer assumes 1.0)."""
    os.makedirs(d, exist_ok=True)
    entries = []
    for i, (t, r) in enumerate(zip(trajs, rewards)):
        name = f"traj-{i:04d}.safetensors"
        safetensors_io.save(os.path.join(d, name), {k: v for k, v in t.items() if isinstance(v, torch.Tensor)})
        e = {"file": name, "reward": r, "policy_version": "v0"}
        temp = t.get("temperature") if temperature == "sampled" else temperature
        if temp is not None:
            e["temperature"] = temp
        entries.append(e)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"trajectories": entries}, f)
    return str(d)
