"""The reference policy: a small byte-level decoder-only transformer whose
feed-forward layers are mixtures of experts with top-k routing.

R3 (rollout routing replay) lives in MoE.forward: pass `replay` to use the
sampler's recorded expert choice instead of selecting anew; the softmax over
the chosen experts still runs on the live router logits, so the router keeps
learning.
"""
import json
import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_io


@dataclass
class Config:
    vocab_size: int = 264      # 256 bytes + 8 special tokens
    block_size: int = 4096     # longest sequence (context + generation)
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_ff: int = 256            # per expert
    n_experts: int = 8
    top_k: int = 2
    value_head: bool = False   # the critic: a full copy with a scalar head
    value_pool: bool = False   # the head also reads a summary of the response so far (Transformer.value_features)
    value_pool_op: str = "mean"   # that summary: "mean" (critics saved before "max" existed) or "max" (pool_response)

    @classmethod
    def from_dict(cls, d):
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>",
                  "<|system|>", "<|user|>", "<|assistant|>"]


class Tokenizer:
    """Bytes are tokens 0..255; chat-template specials follow."""

    def __init__(self):
        self.special = {s: 256 + i for i, s in enumerate(SPECIAL_TOKENS)}
        self.inverse = {v: k for k, v in self.special.items()}
        self.pad, self.bos, self.eos = self.special["<|pad|>"], self.special["<|bos|>"], self.special["<|eos|>"]
        self.im_start, self.im_end = self.special["<|im_start|>"], self.special["<|im_end|>"]

    def encode(self, text, allow_special=True):
        ids, i = [], 0
        while i < len(text):
            if allow_special and text.startswith("<|", i):
                for s, t in self.special.items():
                    if text.startswith(s, i):
                        ids.append(t)
                        i += len(s)
                        break
                else:
                    ids.extend(text[i].encode())
                    i += 1
                continue
            j = text.find("<|", i + 1) if allow_special else -1
            j = len(text) if j < 0 else j
            ids.extend(text[i:j].encode())
            i = j
        return ids

    def decode(self, ids):
        out, buf = [], bytearray()
        for t in ids:
            if t < 256:
                buf.append(t)
                continue
            out.append(buf.decode(errors="replace"))
            buf = bytearray()
            out.append(self.inverse.get(t, ""))
        out.append(buf.decode(errors="replace"))
        return "".join(out)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, cache=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hs)
        past = 0
        if cache is not None:
            if cache.get("k") is not None:
                past = cache["k"].shape[2]
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])  # (B, nh, T, past+T)
        S = k.shape[2]
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=past)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MoE(nn.Module):
    """Top-k mixture of experts. Returns the output and the expert indices used."""

    def __init__(self, cfg):
        super().__init__()
        self.top_k = cfg.top_k
        self.n_experts = cfg.n_experts
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(cfg.n_experts, cfg.d_model, cfg.d_ff) * 0.02)
        self.w2 = nn.Parameter(torch.randn(cfg.n_experts, cfg.d_ff, cfg.d_model) * 0.02)

    def forward(self, x, replay=None, jitter=0.0):
        B, T, C = x.shape
        flat = x.reshape(B * T, C)
        logits = self.router(flat)                                   # (N, E)
        if replay is None:
            # Record: the sampler's own selection (jitter models inference-side noise).
            sel = logits + jitter * torch.randn_like(logits) if jitter > 0 else logits
            idx = sel.topk(self.top_k, dim=-1).indices               # (N, k)
        else:
            # Replay: the recorded selection, weighted by the live logits.
            idx = replay.reshape(B * T, self.top_k).long()
        weights = logits.gather(-1, idx).softmax(dim=-1)            # (N, k)
        out = torch.zeros_like(flat)
        for e in range(self.n_experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            h = F.gelu(flat[rows] @ self.w1[e]) @ self.w2[e]
            out.index_add_(0, rows, h * weights[rows, slot].unsqueeze(-1))
        return out.view(B, T, C), idx.view(B, T, self.top_k)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.moe = MoE(cfg)

    def forward(self, x, replay=None, cache=None, jitter=0.0):
        x = x + self.attn(self.ln1(x), cache)
        h, idx = self.moe(self.ln2(x), replay, jitter)
        return x + h, idx


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        width = 2 * cfg.d_model if cfg.value_head and cfg.value_pool else cfg.d_model
        self.head = nn.Linear(width, 1 if cfg.value_head else cfg.vocab_size, bias=cfg.value_head)
        if cfg.value_head:
            self.register_buffer(VALUE_RANGE, empty_range())

    def forward(self, ids, routing=None, caches=None, start=0, jitter=0.0):
        """ids (B, T); routing (B, T, L, k) to replay, or None to select.
        Returns logits (B, T, V) or values (B, T), and routing (B, T, L, k)."""
        h, used = self.hidden(ids, routing, caches, start, jitter)
        if self.cfg.value_head and self.cfg.value_pool:
            h = pool_response(ids, h, self.cfg.value_pool_op)
        out = self.head(h)
        if self.cfg.value_head:
            out = out.squeeze(-1)
        return out, used

    def value_features(self, ids):
        """What the value head reads at each position (B, T, width): the
        final hidden state, and with value_pool beside it the response's summary."""
        h, _ = self.hidden(ids)
        return pool_response(ids, h, self.cfg.value_pool_op) if self.cfg.value_pool else h

    def hidden(self, ids, routing=None, caches=None, start=0, jitter=0.0):
        """The final hidden states (after ln_f) and the routing used."""
        B, T = ids.shape
        if start + T > self.cfg.block_size:
            raise ValueError(f"sequence of {start + T} tokens exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(start, start + T, device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        used = []
        for i, blk in enumerate(self.blocks):
            rep = None if routing is None else routing[:, :, i, :]
            x, idx = blk(x, rep, None if caches is None else caches[i], jitter)
            used.append(idx)
        return self.ln_f(x), torch.stack(used, dim=2)


ASSISTANT = 256 + SPECIAL_TOKENS.index("<|assistant|>")

# A critic's buffer [lo, hi]: the least and greatest return it has been
# fitted on, which its values are clipped to wherever they stand in for a
# return (a baseline, its explained variance). lo > hi: not fitted yet.
VALUE_RANGE = "value_range"
# State keys newer than some saved states: a state without them loads
# keeping the fresh model's values (an empty range: not fitted yet).
OPTIONAL_KEYS = (VALUE_RANGE,)


def required_missing(missing):
    """The keys of missing (load_state_dict's) that a saved state must have."""
    return [k for k in missing if k not in OPTIONAL_KEYS]


def empty_range():
    return torch.tensor([math.inf, -math.inf])


def widen_range(r, returns):
    """r (a VALUE_RANGE buffer) widened, in place, to cover returns."""
    if returns.numel():
        r.copy_(torch.stack([torch.minimum(r[0], returns.min().to(r)), torch.maximum(r[1], returns.max().to(r))]))


def range_bounds(r):
    """(lo, hi) of a VALUE_RANGE buffer, or None while it is empty (or r is None)."""
    return None if r is None or not bool(r[0] <= r[1]) else (float(r[0]), float(r[1]))


def clip_to_range(values, r):
    """values clipped to r; unchanged while r is empty (or None: a critic
    without the buffer). A linear value head extrapolates on an answer
    unlike any it was fitted on: on the demo, up to 1.90 and down to -1.40
    on a garbled answer of return 0, where every return lies in [0, 1].
    Below the least return, R - V rewards an answer that earned nothing;
    above the greatest, it punishes the best one (docs/learning.md)."""
    b = range_bounds(r)
    return values if b is None else values.clamp(*b)


def pool_response(ids, h, op="mean"):
    """[h_t, summary of h over the response up to t] (B, T, 2C): the
    response starts at the first <|assistant|> (position 0 in a row without
    one), and the summary is zero before it. A language model's state at t
    serves the next token, and once the answer's deciding token (the word)
    is behind it nothing ahead depends on it, so the state at t forgets it:
    a linear head on h_t alone explained 0.16 of the return's variance on
    write-hello rollouts even in sample, on h_t and the response mean 0.5
    held out. The mean dilutes the word by 1/t as the answer goes on; the
    running max (op "max", every critic made now) keeps the word's mark at
    full strength: held out on the -check family's rollouts, fitted on 32 of
    them, 0.76 against the mean's 0.53 (docs/learning.md)."""
    started = (ids == ASSISTANT).cumsum(1) > 0
    started = (started | ~started.any(1, keepdim=True)).unsqueeze(-1)
    if op == "max":
        peak = torch.cummax(torch.where(started, h, torch.full_like(h, torch.finfo(h.dtype).min)), 1).values
        return torch.cat([h, torch.where(started, peak, torch.zeros_like(h))], dim=-1)
    if op != "mean":
        raise ValueError(f"value_pool_op {op!r}: want mean or max")
    started = started.to(h.dtype)
    mean = (h * started).cumsum(1) / started.cumsum(1).clamp(min=1)
    return torch.cat([h, mean], dim=-1)


def save_checkpoint(model, directory, name="model", extra_meta=None):
    os.makedirs(directory, exist_ok=True)
    safetensors_io.save(os.path.join(directory, f"{name}.safetensors"),
                        {k: v.float() for k, v in model.state_dict().items()}, extra_meta)
    tmp = os.path.join(directory, f".{name}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(asdict(model.cfg), f, indent=2)
    os.replace(tmp, os.path.join(directory, f"{name}.json"))


def load_checkpoint(directory, name="model", device="cpu"):
    cfg_path = os.path.join(directory, f"{name}.json")
    w_path = os.path.join(directory, f"{name}.safetensors")
    for p in (cfg_path, w_path):
        if not os.path.exists(p):
            raise FileNotFoundError(f"checkpoint {directory}: {os.path.basename(p)} is missing")
    with open(cfg_path) as f:
        cfg = Config.from_dict(json.load(f))
    model = Transformer(cfg)
    state, meta = safetensors_io.load(w_path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = required_missing(missing)   # a critic saved before the range: not fitted yet
    if missing or unexpected:
        raise ValueError(f"checkpoint {w_path}: missing {missing}, unexpected {unexpected}")
    return model.to(device), meta
