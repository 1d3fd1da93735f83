"""Batches: a directory of trajectory safetensors files plus meta.json.

meta.json: {"trajectories": [{"file": "traj-0000.safetensors", "reward": 0.25,
"temperature": 1.0, ...}, ...]}; temperature (default 1.0, must be > 0) is the
sampling temperature, at which the trainer computes the policy's log-probs;
seen (default false) marks, for critic_fit, a trajectory the critic was fitted
on before, which its held-out explained_variance_before leaves out.
Each file holds tokens (int32 [T]), loss_mask (uint8 [T]), logprobs (float32 [T],
the sampler's log-prob of each loss token) and, for PPO, routed_experts
(integer [P, layers, top_k], P >= T-1: the sampler's expert choice at every
position it processed).
"""
import json
import math
import os
from collections import namedtuple
from dataclasses import dataclass

import torch

import safetensors_io


class RoutingError(ValueError):
    """Routing missing or invalid: the sample must not be trained on."""


@dataclass
class Trajectory:
    name: str
    tokens: torch.Tensor        # (T,) long
    loss_mask: torch.Tensor     # (T,) bool
    logprobs: torch.Tensor      # (T,) float
    routing: torch.Tensor       # (T-1, L, k) long, or None
    reward: float
    temperature: float = 1.0    # the sampler's temperature: log-probs are of logits / temperature
    has_logprobs: bool = True   # False: the file has no logprobs tensor (zeros stand in)
    origin: str = ""            # the rollout and context it came from (the file's metadata), for errors
    seen: bool = False          # critic_fit: the critic was fitted on it before (meta.json "seen"): not held out


# A batch stacked for the training forward over tokens[:-1]; position j predicts token j+1.
Padded = namedtuple("Padded", "inputs targets mask sampler_logp routing temperature")


def load(batch_dir, n_layer, n_experts, top_k, need_routing, allow_seen=False):
    """The batch in batch_dir. A trajectory marked seen (a critic_fit's
    earlier rounds) is refused unless allow_seen: any other operation would
    train on it as new."""
    meta_path = os.path.join(batch_dir, "meta.json")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"batch {batch_dir}: meta.json is missing")
    with open(meta_path) as f:
        meta = json.load(f)
    entries = meta.get("trajectories")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{meta_path}: trajectories must be a non-empty list")
    out = []
    for i, e in enumerate(entries):
        where = f"{meta_path}: trajectories[{i}]"
        if "file" not in e:
            raise ValueError(f"{where}.file is missing")
        seen = e.get("seen", False)
        if not isinstance(seen, bool):
            raise ValueError(f"{where}.seen must be true or false")
        if seen and not allow_seen:
            raise ValueError(f"{where}.seen is for critic_fit only")
        path = os.path.join(batch_dir, e["file"])
        t, file_meta = safetensors_io.load(path)
        for k in ("tokens", "loss_mask"):
            if k not in t:
                raise ValueError(f"{path}: tensor {k} is missing")
        tokens = t["tokens"].long()
        T = tokens.shape[0]
        mask = t["loss_mask"].bool()
        logp = t["logprobs"].float() if "logprobs" in t else torch.zeros(T)
        if mask.shape[0] != T or logp.shape[0] != T:
            raise ValueError(f"{path}: tokens, loss_mask and logprobs must have the same length")
        if T < 2 or not mask[1:].any():
            raise ValueError(f"{path}: no loss token after the first position")
        routing = None
        if need_routing:
            routing = validate_routing(path, t.get("routed_experts"), T, n_layer, n_experts, top_k)
        reward = e.get("reward", 0.0)
        if not isinstance(reward, (int, float)):
            raise ValueError(f"{where}.reward must be a number")
        out.append(Trajectory(path, tokens, mask, logp, routing, float(reward), temperature_of(e, where),
                              has_logprobs="logprobs" in t, origin=origin_of(file_meta, e), seen=seen))
    return meta, out


def origin_of(file_meta, entry):
    """Where a trajectory came from, as the Go side records it: rollout ID and
    token context in the file's metadata, the task in meta.json."""
    parts = [f"{k} {v}" for k, v in (("rollout", file_meta.get("rollout_id")), ("context", file_meta.get("context")),
                                     ("task", entry.get("task_id"))) if v not in (None, "")]
    return ", ".join(parts) or "no rollout recorded"


def require_sampler_logprobs(trajs, why):
    """Every loss token needs the sampler's own log-prob (TITO) for an
    importance weight: a missing or non-finite one is an error naming the
    trajectory, never a silent weight."""
    for t in trajs:
        if not t.has_logprobs:
            bad = "has no logprobs tensor"
        elif not torch.isfinite(t.logprobs[t.loss_mask]).all():
            bad = "holds a non-finite sampler log-prob at a loss token"
        else:
            continue
        raise ValueError(f"{t.name} ({t.origin}): {bad}; {why} needs the sampler's log-prob of every loss token "
                         "(record them at rollout time, or set ppo.is_correction = \"none\")")


def temperature_of(entry, where):
    """The sampling temperature of one trajectory: PPO's ratio compares
    log-probs of the distribution the sampler drew from, logits / temperature."""
    t = entry.get("temperature", 1.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        raise ValueError(f"{where}.temperature = {t!r} must be a number > 0 (the sampling temperature; "
                         "greedy (0) rollouts have no log-probs to train PPO on)")
    return float(t)


def validate_routing(path, r, T, n_layer, n_experts, top_k):
    """Every position the training forward processes needs its recorded experts."""
    if r is None:
        raise RoutingError(f"{path}: routed_experts is missing; R3 needs the sampler's routing for every token")
    if r.dim() != 3 or r.shape[1] != n_layer or r.shape[2] != top_k:
        raise RoutingError(f"{path}: routed_experts has shape {list(r.shape)}, expected [positions, {n_layer}, {top_k}]")
    if r.shape[0] < T - 1:
        raise RoutingError(f"{path}: routed_experts covers {r.shape[0]} positions, the trajectory needs {T - 1}")
    r = r[:T - 1].long()
    if r.min() < 0 or r.max() >= n_experts:
        raise RoutingError(f"{path}: routed_experts holds expert IDs outside [0, {n_experts})")
    for layer in range(n_layer):
        if not r[:, layer].any():
            raise RoutingError(f"{path}: layer {layer} of routed_experts is all zero (capture failed)")
    return r


def pad(trajs, device):
    """Stack trajectories for the training forward over tokens[:-1] (a Padded)."""
    n = max(t.tokens.shape[0] for t in trajs)
    B = len(trajs)
    inputs = torch.zeros(B, n - 1, dtype=torch.long)
    targets = torch.zeros(B, n - 1, dtype=torch.long)
    mask = torch.zeros(B, n - 1, dtype=torch.bool)
    old = torch.zeros(B, n - 1)
    temperature = torch.tensor([t.temperature for t in trajs]).view(B, 1, 1)
    routing = None
    if trajs[0].routing is not None:
        L, k = trajs[0].routing.shape[1:]
        routing = torch.zeros(B, n - 1, L, k, dtype=torch.long)
        routing[..., :] = torch.arange(k)  # harmless distinct experts on padding
    for i, t in enumerate(trajs):
        T = t.tokens.shape[0]
        inputs[i, :T - 1] = t.tokens[:-1]
        targets[i, :T - 1] = t.tokens[1:]
        mask[i, :T - 1] = t.loss_mask[1:]     # position j predicts token j+1: train it where j+1 was sampled
        old[i, :T - 1] = t.logprobs[1:]
        if routing is not None:
            routing[i, :T - 1] = t.routing       # R3: the experts that processed position j
    move = lambda x: None if x is None else x.to(device)
    return Padded(move(inputs), move(targets), move(mask), move(old), move(routing), move(temperature))
