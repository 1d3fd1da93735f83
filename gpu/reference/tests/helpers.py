import json
import os
import types

import torch

import model as M
import safetensors_io
import server
import trainer as T


def make_engine(seed=0, sample_dtype="float32", jitter=0.0, drop=0.0, model_dir=None, state=None):
    args = types.SimpleNamespace(model=model_dir, seed=seed, device="cpu", sample_dtype=sample_dtype,
                                 router_jitter=jitter, drop_routing_frac=drop, fault_seed=1, state=state)
    return server.Engine(args)


def make_trainer(workdir, seed=0, init="random", slow_ms=0):
    args = types.SimpleNamespace(workdir=str(workdir), init=init, seed=seed, device="cpu", slow_ms=slow_ms)
    return T.Trainer(args)


def rollout(engine, prompt, max_new=24, seed=0):
    """One sampled trajectory in the batch format: prompt tokens are context, generated tokens are loss tokens."""
    r = engine.generate({"input_ids": prompt, "sampling_params": {"max_new_tokens": max_new, "seed": seed, "temperature": 1.0},
                         "return_logprob": True, "return_routed_experts": True})
    out = r["output_ids"]
    tokens = prompt + out
    mask = [0] * len(prompt) + [1] * len(out)
    logp = [0.0] * len(prompt) + [lp for lp, _, _ in r["meta_info"]["output_token_logprobs"]]
    import base64
    import numpy as np
    cfg = engine.model.cfg
    routing = np.frombuffer(base64.b64decode(r["meta_info"]["routed_experts"]), dtype=np.int32).reshape(-1, cfg.n_layer, cfg.top_k)
    return {"tokens": torch.tensor(tokens, dtype=torch.int32), "loss_mask": torch.tensor(mask, dtype=torch.uint8),
            "logprobs": torch.tensor(logp, dtype=torch.float32), "routed_experts": torch.from_numpy(routing.astype("uint8"))}


def write_batch(d, trajs, rewards):
    os.makedirs(d, exist_ok=True)
    entries = []
    for i, (t, r) in enumerate(zip(trajs, rewards)):
        name = f"traj-{i:04d}.safetensors"
        safetensors_io.save(os.path.join(d, name), t)
        entries.append({"file": name, "reward": r, "policy_version": "v0"})
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"trajectories": entries}, f)
    return str(d)
