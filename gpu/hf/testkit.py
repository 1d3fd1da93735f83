"""Rollouts and batch directories for gpu/hf's tests, bench.py and
device_check.sh: what the Go harness does, in a few lines -- sample from a
server Engine with log-probs and routing, stitch turns, write a batch
directory in the trainer's format (gpu/reference/batch.py)."""
import base64
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import safetensors_io  # noqa: E402  (gpu/reference)


def routing_of(engine, resp):
    """meta_info.routed_experts (SGLang's layout: every layer, dense ones zero)
    decoded to the trajectory's (positions, MoE layers, top_k) int32."""
    f = engine.info()
    raw = np.frombuffer(base64.b64decode(resp["meta_info"]["routed_experts"]), dtype="<i4")
    return raw.reshape(-1, f["num_hidden_layers"], f["top_k"])[:, f["moe_layers"], :].copy()


def prompt_ids(engine, system, user):
    """The first prompt, from the chat contract, as the Go harness builds it:
    template pieces with special tokens parsed, message text with them split."""
    c = engine.info()["chat"]
    pieces = [(c["system_prefix"], False), (system, True), (c["end_of_turn"] + c["turn_separator"] + c["user_prefix"], False),
              (user, True), (c["end_of_turn"] + c["turn_separator"] + c["assistant_prefix"], False)]
    ids = []
    for text, split in pieces:
        ids += engine.tokenize({"text": text, "split_special_tokens": split})["tokens"]
    return ids


def episode(engine, prompt, turns=1, max_new=12, seed=0, temperature=1.0, observation="ok"):
    """A trajectory: each turn sends the whole history, asks for routing from
    the first position not yet covered, and appends masked observation glue.
    Returns {tokens, loss_mask, logprobs, routed_experts, temperature}."""
    c = engine.info()["chat"]
    tokens, mask, logp, routes = list(prompt), [0] * len(prompt), [0.0] * len(prompt), []
    covered = 0
    for i in range(turns):
        r = engine.generate({"input_ids": tokens, "return_logprob": True, "return_routed_experts": True,
                             "routed_experts_start_len": covered,
                             "sampling_params": {"max_new_tokens": max_new, "seed": seed * 1000 + i,
                                                 "temperature": temperature, "stop_token_ids": [c["end_of_turn_id"]]}})
        out = r["output_ids"]
        tokens += out
        mask += [1] * len(out)
        logp += [lp for lp, _, _ in r["meta_info"]["output_token_logprobs"]]
        routes.append(routing_of(engine, r))
        covered = len(tokens) - 1   # T-1 rows: the last sampled token has none
        if i + 1 < turns:
            glue = ("" if out and out[-1] == c["end_of_turn_id"] else c["end_of_turn"]) + c["turn_separator"] + c["user_prefix"]
            ids = engine.tokenize({"text": glue})["tokens"] + engine.tokenize({"text": observation, "split_special_tokens": True})["tokens"]
            ids += engine.tokenize({"text": c["end_of_turn"] + c["turn_separator"] + c["assistant_prefix"]})["tokens"]
            tokens += ids
            mask += [0] * len(ids)
            logp += [0.0] * len(ids)
    return {"tokens": tokens, "loss_mask": mask, "logprobs": logp,
            "routed_experts": np.concatenate(routes, axis=0), "temperature": temperature}


def write_batch(batch_dir, trajs, rewards=None):
    """A batch directory: one safetensors file per trajectory plus meta.json."""
    os.makedirs(batch_dir, exist_ok=True)
    entries = []
    for i, t in enumerate(trajs):
        name = f"traj-{i:04d}.safetensors"
        tensors = {"tokens": np.asarray(t["tokens"], np.int32), "loss_mask": np.asarray(t["loss_mask"], np.uint8),
                   "logprobs": np.asarray(t["logprobs"], np.float32)}
        if t.get("routed_experts") is not None:
            tensors["routed_experts"] = np.asarray(t["routed_experts"], np.int32)
        safetensors_io.save(os.path.join(batch_dir, name), tensors)
        reward = rewards[i] if rewards is not None else float(i % 2)
        entries.append({"file": name, "reward": reward, "temperature": t.get("temperature", 1.0), "policy_version": "v0"})
    with open(os.path.join(batch_dir, "meta.json"), "w") as f:
        json.dump({"trajectories": entries}, f)
    return batch_dir
