"""Reference inference server speaking the subset of SGLang's native API that
t1flow's rollouts use: /generate (token IDs in and out, log-probs, routed
experts), /tokenize, /detokenize, /update_weights_from_disk, /get_model_info,
/health, /health_generate.

To reproduce the train-inference mismatch, it can sample in bfloat16
(--sample-dtype) and jitter the router's selection (--router-jitter). For
fault-injection tests it can drop routing from a fraction of responses
(--drop-routing-frac) or from the first N (--drop-routing-first).

Like SGLang's radix cache, a prefix cache keeps the attention keys/values and
the routed experts of every token it has processed, so a multi-turn episode's
context is computed (and routed) once: a later turn reuses the recorded
routing of its prefix and only new positions are routed afresh. Without it
(--disable-radix-cache) every turn re-routes the whole context, with new
router noise, and the routing an episode recorded at earlier turns is no
longer the routing later turns were sampled under.
"""
import argparse
import base64
import json
import math
import os
import random
import sys
import threading
import time
from collections import OrderedDict

import numpy as np
import torch

import httpjson
import model as M

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def sampling_temperature(sp):
    t = sp.get("temperature", 1.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise httpjson.HTTPError(400, f"sampling_params.temperature = {t!r} must be a number >= 0 "
                                      "(0 samples greedily; PPO needs rollouts sampled at > 0)")
    return float(t)


# SGLang's finish reasons, in its meta_info shape; the server returns no other.
def finish_stop(token):
    return {"type": "stop", "matched": token}      # a stop token (eos or stop_token_ids) was sampled


def finish_length(n):
    return {"type": "length", "length": n}         # max_new_tokens reached


def finish_abort(message):
    return {"type": "abort", "message": message}   # the request was abandoned; output so far is returned


class PrefixCache:
    """Token sequences the model has processed, each with its per-layer
    keys/values (L x (1, heads, n, hs)) and routed experts (n, L, k); least
    recently used first out, bounded by the tokens held. A lookup returns the
    longest common prefix with any entry, as a radix tree would; an entry that
    is a prefix of a newer one is dropped, since the newer one holds it."""

    def __init__(self, max_tokens):
        self.max_tokens = max_tokens
        self.entries = OrderedDict()   # id -> (tokens np.int64 (n,), kv, routing)
        self.tokens = 0
        self.next_id = 0

    def lookup(self, ids):
        """(entry or None, n): the entry sharing the longest prefix with ids, and that length."""
        ids = np.asarray(ids, dtype=np.int64)
        best, best_n = None, 0
        for key, e in self.entries.items():
            m = min(len(e[0]), len(ids))
            diff = np.flatnonzero(e[0][:m] != ids[:m])
            n = int(diff[0]) if diff.size else m
            if n > best_n:
                best, best_n = key, n
        if best is None:
            return None, 0
        self.entries.move_to_end(best)
        return self.entries[best], best_n

    def insert(self, ids, kv, routing):
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        if n > self.max_tokens:
            return
        for key in [k for k, e in self.entries.items() if len(e[0]) <= n and np.array_equal(e[0], ids[:len(e[0])])]:
            self.tokens -= len(self.entries.pop(key)[0])
        while self.entries and self.tokens + n > self.max_tokens:
            self.tokens -= len(self.entries.popitem(last=False)[1][0])
        self.entries[self.next_id] = (ids, kv, routing)
        self.next_id += 1
        self.tokens += n

    def clear(self):
        self.entries.clear()
        self.tokens = 0


class Engine:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.tok = M.Tokenizer()
        self.fault_rng = random.Random(args.fault_seed)
        self.dropped_first = 0  # responses whose routing --drop-routing-first dropped
        self.device = args.device
        self.cache = None if getattr(args, "disable_radix_cache", False) else PrefixCache(getattr(args, "prefix_cache_tokens", 1 << 16))
        served = self.last_served()
        if served:
            # A restarted server comes back serving what it served before,
            # so rollouts keep sampling the policy version the campaign expects.
            self.load(served)
        elif args.model:
            self.load(args.model)
        else:
            torch.manual_seed(args.seed)
            cfg = M.Config(block_size=args.block_size) if getattr(args, "block_size", 0) else M.Config()
            self.set_model(M.Transformer(cfg), f"random-{args.seed}", "random")

    def set_model(self, m, version, path):
        m.eval()
        self.model = m.to(self.device, DTYPES[self.args.sample_dtype])
        self.weight_version, self.model_path = version, path
        if getattr(self, "cache", None) is not None:
            self.cache.clear()   # new weights: nothing computed by the old ones is valid

    def load(self, path):
        m, meta = M.load_checkpoint(path, "model", self.device)
        self.set_model(m, meta.get("version", os.path.basename(os.path.normpath(path))), path)

    def last_served(self):
        """The checkpoint named by --state, if it is still there."""
        st = getattr(self.args, "state", None)
        if not st or not os.path.exists(st):
            return None
        try:
            with open(st) as f:
                path = json.load(f).get("model_path")
        except (OSError, ValueError) as e:
            print(f"ignoring unreadable --state {st}: {e}", flush=True)
            return None
        if path and os.path.isdir(path):
            return path
        print(f"--state {st} names {path!r}, which is gone; starting from --model", flush=True)
        return None

    def remember(self, path):
        st = getattr(self.args, "state", None)
        if not st:
            return
        tmp = st + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"model_path": os.path.abspath(path), "weight_version": self.weight_version}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, st)

    def info(self, _=None):
        c = self.model.cfg
        return {
            "model_path": self.model_path, "weight_version": self.weight_version, "is_generation": True,
            "num_layers": c.n_layer, "num_experts": c.n_experts, "top_k": c.top_k,
            "vocab_size": c.vocab_size, "block_size": c.block_size, "max_total_num_tokens": c.block_size,
            "special_tokens": self.tok.special, "sample_dtype": self.args.sample_dtype,
            "router_jitter": self.args.router_jitter,
            "radix_cache": self.cache is not None, "prefix_cache_tokens": self.cache.max_tokens if self.cache else 0,
            # The model facts in config.json's terms (the Go side reads every
            # engine's model from a config.json): every layer is MoE.
            "config": {"model_type": "t1flow_reference", "num_hidden_layers": c.n_layer, "num_experts": c.n_experts,
                       "num_experts_per_tok": c.top_k, "vocab_size": c.vocab_size, "max_position_embeddings": c.block_size},
            # The chat template the Go harness renders prompts and glue with
            # (docs/trainer-protocol.md); the sampler stops on end_of_turn_id.
            "chat": {"system_prefix": "<|im_start|><|system|>", "user_prefix": "<|im_start|><|user|>",
                     "assistant_prefix": "<|im_start|><|assistant|>", "end_of_turn": "<|im_end|>",
                     "end_of_turn_id": self.tok.im_end, "turn_separator": ""},
        }

    def _prefill(self, ids, jitter):
        """Run the prompt; return per-layer KV caches, the last logits, the routing
        of every prompt position, and how many positions came from the prefix cache.
        Cached positions keep their recorded experts (R3 stays exact across turns);
        only new positions are routed afresh, with the router's noise."""
        caches = [{} for _ in range(self.model.cfg.n_layer)]
        entry, c = self.cache.lookup(ids) if self.cache is not None else (None, 0)
        n = len(ids)
        reuse = min(c, n - 1)   # the last prompt position runs again: its logits start the reply
        x = torch.tensor([ids], device=self.device)
        routes = []
        if reuse > 0:
            for layer, (k, v) in zip(caches, entry[1]):
                layer["k"], layer["v"] = k[:, :, :reuse], v[:, :, :reuse]
            routes.append(entry[2][:reuse])
        if c > reuse:   # the whole prompt was cached: replay its last position's experts
            logits, r = self.model(x[:, reuse:c], routing=entry[2][reuse:c].unsqueeze(0), caches=caches, start=reuse)
            routes.append(r[0])
        if n > c:
            logits, r = self.model(x[:, c:], caches=caches, start=c, jitter=jitter)
            routes.append(r[0])
        return caches, logits, routes, reuse

    @torch.no_grad()
    def generate(self, req):
        ids = req.get("input_ids")
        if ids is None and "text" in req:
            ids = self.tok.encode(req["text"])
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
            raise httpjson.HTTPError(400, "input_ids must be a non-empty list of token IDs")
        V = self.model.cfg.vocab_size
        if min(ids) < 0 or max(ids) >= V:
            raise httpjson.HTTPError(400, f"input_ids holds a token outside [0, {V})")
        sp = req.get("sampling_params") or {}
        temperature = sampling_temperature(sp)
        top_p = float(sp.get("top_p", 1.0))
        max_new = int(sp.get("max_new_tokens", 128))
        stop_ids = set(sp.get("stop_token_ids") or []) | {self.tok.eos}
        if len(ids) + max_new > self.model.cfg.block_size:
            raise httpjson.HTTPError(400, f"prompt of {len(ids)} tokens + max_new_tokens {max_new} exceeds the context of {self.model.cfg.block_size}")
        want_routing = bool(req.get("return_routed_experts"))
        start_len = int(req.get("routed_experts_start_len", 0))
        gen = torch.Generator().manual_seed(int(sp["seed"])) if "seed" in sp else None
        jitter = self.args.router_jitter
        # Greedy (temperature 0) reports log-probs at temperature 1, as SGLang
        # does (it samples top_k = 1 at temperature 1); PPO cannot train on them.
        scale = temperature if temperature > 0 else 1.0

        with self.lock:
            self._hang_once()
            caches, logits, routes, cached = self._prefill(ids, jitter)
            out_ids, logprobs, finish = [], [], finish_length(max_new)
            pos = len(ids)
            for _ in range(max_new):
                self.stepped = time.monotonic()
                last = logits[0, -1].float()
                if not torch.isfinite(last).all():
                    finish = finish_abort(f"non-finite logits at position {pos}")
                    break
                lp = torch.log_softmax(last / scale, dim=-1)   # log-probs of the distribution sampled from
                if temperature == 0:
                    t = int(last.argmax())
                else:
                    probs = lp.exp()
                    if top_p < 1.0:
                        sp_, si = probs.sort(descending=True)
                        keep = sp_.cumsum(0) - sp_ < top_p
                        probs = torch.zeros_like(probs).scatter(0, si[keep], sp_[keep])
                    t = int(torch.multinomial(probs / probs.sum(), 1, generator=gen))
                out_ids.append(t)
                logprobs.append(float(lp[t]))
                if t in stop_ids:
                    finish = finish_stop(t)
                    break
                if len(out_ids) == max_new:
                    break
                logits, routing = self.model(torch.tensor([[t]], device=self.device), caches=caches, start=pos, jitter=jitter)
                routes.append(routing[0])
                pos += 1
            # The last sampled token has not been through the model: as SGLang
            # and vLLM, it has no routing row (T-1 rows: positions [start, len-1)).
            routes = torch.cat(routes, dim=0)   # (positions processed, L, k)
            if self.cache is not None and finish["type"] != "abort":
                processed = (ids + out_ids)[:routes.shape[0]]
                self.cache.insert(processed, [(c["k"], c["v"]) for c in caches], routes)

        meta = {
            "prompt_tokens": len(ids), "completion_tokens": len(out_ids), "cached_tokens": cached,
            "finish_reason": finish, "weight_version": self.weight_version,
        }
        if req.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, out_ids)]
        if want_routing:
            r = routes[start_len:].to(torch.int32).cpu().numpy()  # (positions, L, k)
            first = self.dropped_first < getattr(self.args, "drop_routing_first", 0)
            self.dropped_first += first
            if first or self.args.drop_routing_frac > 0 and self.fault_rng.random() < self.args.drop_routing_frac:
                meta["routed_experts_dropped"] = True  # fault injection: routing "lost"
            else:
                meta["routed_experts"] = base64.b64encode(np.ascontiguousarray(r).tobytes()).decode()
        return {"text": self.tok.decode(out_ids), "output_ids": out_ids, "meta_info": meta}

    def _hang_once(self):
        """Fault injection (--hang-once FILE): while FILE exists, the next
        generation removes it and hangs holding the engine lock, as a wedged
        engine would: /health still answers, /generate and /health_generate
        never do, until the process is killed."""
        hang = getattr(self.args, "hang_once", "")
        if hang and os.path.exists(hang):
            os.remove(hang)
            print(f"inference: hanging in /generate ({hang})", file=sys.stderr, flush=True)
            while True:
                time.sleep(1)

    def chat(self, req):
        """OpenAI-compatible chat completions over the chat template (text in and out)."""
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise httpjson.HTTPError(400, "messages must be a non-empty list")
        roles = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
        text = ""
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in roles or not isinstance(m.get("content"), str):
                raise httpjson.HTTPError(400, f"messages[{i}] needs a role (system, user or assistant) and string content")
            text += "<|im_start|>" + roles[m["role"]] + m["content"] + "<|im_end|>"
        ids = self.tok.encode(text + "<|im_start|><|assistant|>")
        max_tokens = int(req.get("max_tokens") or 256)
        if len(ids) + max_tokens > self.model.cfg.block_size:
            raise httpjson.HTTPError(400, f"This model's maximum context length is {self.model.cfg.block_size} tokens; the messages use {len(ids)} and max_tokens {max_tokens}")
        sp = {"max_new_tokens": max_tokens, "temperature": float(req.get("temperature", 1.0)),
              "stop_token_ids": [self.tok.im_end]}
        if "seed" in req:
            sp["seed"] = req["seed"]
        out = self.generate({"input_ids": ids, "sampling_params": sp})
        ids_out = out["output_ids"]
        if ids_out and ids_out[-1] == self.tok.im_end:
            ids_out = ids_out[:-1]
        finish = out["meta_info"]["finish_reason"]["type"]   # stop, length or abort
        return {
            "id": "chatcmpl-t1flow", "object": "chat.completion", "model": req.get("model", self.weight_version),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.tok.decode(ids_out)}, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out["output_ids"]),
                      "total_tokens": len(ids) + len(out["output_ids"])},
        }

    def tokenize(self, req):
        if not isinstance(req.get("text"), str):
            raise httpjson.HTTPError(400, "text must be a string")
        split = req.get("split_special_tokens", False)
        if not isinstance(split, bool):
            raise httpjson.HTTPError(400, "split_special_tokens must be true or false")
        # split_special_tokens (Hugging Face tokenizers' name): special-token text
        # such as "<|im_end|>" in terminal output is encoded as its plain bytes,
        # never as a control token. add_special_tokens: false does the same (kept
        # for older clients).
        allow = req.get("add_special_tokens", True) and not split
        ids = self.tok.encode(req["text"], allow_special=allow)
        return {"tokens": ids, "count": len(ids), "max_model_len": self.model.cfg.block_size}

    def detokenize(self, req):
        ids = req.get("tokens")
        if not isinstance(ids, list):
            raise httpjson.HTTPError(400, "tokens must be a list of token IDs")
        return {"text": self.tok.decode(ids)}

    def update_weights(self, req):
        path = req.get("model_path")
        if not path:
            raise httpjson.HTTPError(400, "model_path is required")
        with self.lock:
            self.load(path)
            self.remember(path)
        return {"success": True, "message": f"loaded {path}", "weight_version": self.weight_version}

    def health_generate(self, _):
        if generating(self):
            return {"ok": True, "busy": True}
        self.generate({"input_ids": [self.tok.bos], "sampling_params": {"max_new_tokens": 1}})
        return {"ok": True}


# A generation that stepped this recently counts as progress: the watchdog's
# probe is answered at once instead of queueing behind busy generations for
# the engine lock (a loaded but healthy server is not hung).
STEP_FRESH_S = 5.0


def generating(engine):
    """True while a generation holds the engine lock and has decoded a token
    within STEP_FRESH_S: a wedged engine stops stepping, so it is probed."""
    return engine.lock.locked() and time.monotonic() - getattr(engine, "stepped", float("-inf")) < STEP_FRESH_S


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--model", help="checkpoint directory (model.safetensors + model.json); default: random init")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random init")
    ap.add_argument("--state", help="file where the server records the checkpoint it serves; a restart serves it again")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sample-dtype", choices=list(DTYPES), default="float32")
    ap.add_argument("--router-jitter", type=float, default=0.0, help="std of noise added to router logits when selecting experts")
    ap.add_argument("--disable-radix-cache", action="store_true",
                    help="no prefix cache: every request re-runs (and re-routes) its whole prompt, as SGLang's flag of that name")
    ap.add_argument("--prefix-cache-tokens", type=int, default=1 << 16, help="tokens the prefix cache holds at most (LRU)")
    ap.add_argument("--drop-routing-frac", type=float, default=0.0, help="fault injection: share of responses whose routing is dropped")
    ap.add_argument("--drop-routing-first", type=int, default=0, help="fault injection: drop the routing of the first N responses that ask for it")
    ap.add_argument("--fault-seed", type=int, default=1)
    ap.add_argument("--hang-once", default="", help="fault injection: while this file exists, the next generation removes it and hangs holding the engine lock")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--block-size", type=int, default=0, help="context length of a random init (0: the default config)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    eng = Engine(args)
    routes = {
        ("GET", "/health"): lambda _: {"ok": True},
        ("GET", "/health_generate"): eng.health_generate,
        ("GET", "/get_model_info"): eng.info,
        ("POST", "/generate"): eng.generate,
        ("POST", "/tokenize"): eng.tokenize,
        ("POST", "/detokenize"): eng.detokenize,
        ("POST", "/update_weights_from_disk"): eng.update_weights,
        ("POST", "/v1/chat/completions"): eng.chat,
    }
    httpjson.serve(args.host, args.port, routes, "t1flow reference inference server").serve_forever()


if __name__ == "__main__":
    main()
