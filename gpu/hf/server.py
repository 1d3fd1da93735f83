"""Hugging Face inference server behind the reference server's protocol
(gpu/reference/server.py, SGLang's native API subset): /generate (token IDs in
and out, log-probs at the sampling temperature, routed experts in SGLang's
layout), /tokenize, /detokenize, /get_model_info (plus the chat contract read
off the checkpoint's chat template), /update_weights_from_disk (a checkpoint
directory as gpu/hf/trainer.py saves it, or any HF checkpoint of the same
architecture), /health, /health_generate, /v1/chat/completions.

Any Qwen3-MoE, OLMoE or Mixtral checkpoint directory (transformers'
save_pretrained layout, with its tokenizer). Routing is captured in every MoE
block's router (hfmoe.py). Like the reference (and SGLang's radix cache), a
prefix cache keeps each processed context's keys/values and routed experts, so
a multi-turn episode's prefix keeps the routing it was sampled under
(--disable-radix-cache turns it off). Every flag the Go supervisor passes to
the reference server is accepted; --sample-dtype is --dtype.
"""
import argparse
import base64
import json
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(os.path.dirname(HERE), "reference")
sys.path.insert(0, REFERENCE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hfmoe  # noqa: E402
import httpjson  # noqa: E402  (gpu/reference)


# gpu/reference/server.py: the temperature check, SGLang's finish reasons, the
# prefix cache (it holds any per-layer (k, v) list and (n, L, k) routing) and
# --state are the same.
_ref = hfmoe.reference_module("server")
sampling_temperature, finish_stop, finish_length, finish_abort = (
    _ref.sampling_temperature, _ref.finish_stop, _ref.finish_length, _ref.finish_abort)
PrefixCache = _ref.PrefixCache


class Engine:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()       # one forward at a time; weights swap under it
        self.tok_lock = threading.Lock()   # the fast tokenizer's split_special_tokens switch is shared state
        self.device = args.device
        self.dtype = args.dtype or hfmoe.default_dtype(args.device)
        self.fault_rng = random.Random(args.fault_seed)
        self.dropped_first = 0
        self.jitter_gen = torch.Generator().manual_seed(args.seed)
        self.cache = None if args.disable_radix_cache else PrefixCache(args.prefix_cache_tokens)
        self.model = self.tok = None
        path = self.last_served() or args.model
        if not path:
            raise SystemExit("server.py: --model DIR (a Hugging Face checkpoint directory) is required")
        self.load(path)

    # ---- weights -------------------------------------------------------------
    def load(self, path):
        """Serve the checkpoint at path: in place when it has the served
        model's parameters (no second copy in memory), else a fresh load."""
        hfmoe.check_dir(path)
        tok = self._tokenizer_for(path)
        chat = hfmoe.chat_contract(tok, path if _has_tokenizer(path) else self.model_path)
        if self.model is None or not self._load_in_place(path):
            self.model = None
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            self.model = hfmoe.load_model(path, self.device, self.dtype)
        self.tok, self.chat = tok, chat
        self.stop_ids = hfmoe.stop_ids(self.model, tok)
        self.block_size = hfmoe.context_length(self.model, self.args.block_size)
        self.weight_version, self.model_path = hfmoe.read_version(path), path
        if self.cache is not None:
            self.cache.clear()   # new weights: nothing the old ones computed is valid

    def _tokenizer_for(self, path):
        if _has_tokenizer(path):
            return hfmoe.load_tokenizer(path)
        if self.tok is None:
            raise FileNotFoundError(f"checkpoint {path}: no tokenizer (tokenizer_config.json) to serve with")
        return self.tok

    def _load_in_place(self, path):
        """Copy path's weights into the served model, one tensor at a time (no
        second copy of the model in memory); False, having changed nothing,
        when they are not the served model's parameters."""
        from safetensors import safe_open

        with open(os.path.join(path, "config.json")) as f:
            if json.load(f).get("model_type") != self.model.config.model_type:
                return False
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if n.startswith("model") and n.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"checkpoint {path}: no model*.safetensors")
        own = self.model.state_dict()
        shapes = {}
        for fn in files:
            with safe_open(fn, "pt") as f:
                shapes.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
        if any(k not in own or tuple(own[k].shape) != shape for k, shape in shapes.items()):
            return False
        missing = set(own) - set(shapes)
        if missing and not (self.model.config.tie_word_embeddings and missing <= {"lm_head.weight"}):
            return False
        with torch.no_grad():
            for fn in files:
                with safe_open(fn, "pt") as f:
                    for k in f.keys():
                        own[k].copy_(f.get_tensor(k).to(own[k].dtype))
                        self.stepped = time.monotonic()   # a long load is progress, not a hang
        return True

    # --state: the checkpoint served, so a restart serves it again (as the reference).
    last_served = _ref.Engine.last_served
    remember = _ref.Engine.remember

    def info(self, _=None):
        facts = hfmoe.model_facts(self.model)
        return {
            "model_path": self.model_path, "weight_version": self.weight_version, "is_generation": True,
            **facts, "block_size": self.block_size, "max_total_num_tokens": self.block_size,
            "special_tokens": hfmoe.special_tokens(self.tok), "eos_token_ids": sorted(self.stop_ids),
            "sample_dtype": self.dtype, "dtype": self.dtype, "device": self.device,
            "router_jitter": self.args.router_jitter, "backend": "hf",
            "radix_cache": self.cache is not None, "prefix_cache_tokens": self.cache.max_tokens if self.cache else 0,
            "chat": self.chat,
            "config": hfmoe.config_json(self.model, self.model_path),
        }

    # ---- forward -------------------------------------------------------------
    def _forward(self, ids, cache, start, capture, force=None, jitter=0.0):
        """Run ids (a list, or a (T,) tensor) at positions start.. through the
        model with cache; return the last position's logits (float32, V) and
        the routing of the positions run (T, L, k), or None without capture."""
        x = torch.as_tensor(ids, device=self.device).view(1, -1)
        pos = torch.arange(start, start + x.shape[1], device=self.device)
        with hfmoe.routing(self.model, force=force, capture=capture, jitter=jitter, generator=self.jitter_gen) as cap:
            out = self.model(input_ids=x, past_key_values=cache, use_cache=True, cache_position=pos,
                             position_ids=pos.unsqueeze(0), logits_to_keep=1)
        r = hfmoe.stacked(cap, self.model.t1_routing.n_layers)[0] if capture else None
        return out.logits[0, -1].float(), r

    def _prefill(self, ids, capture):
        """The prompt through the model: (cache, last logits, routing pieces,
        positions reused). Cached positions keep their recorded experts; only
        new positions are routed afresh (with the router's noise)."""
        from transformers import DynamicCache

        entry, c = self.cache.lookup(ids) if self.cache is not None else (None, 0)
        n = len(ids)
        reuse = min(c, n - 1)   # the last prompt position runs again: its logits start the reply
        routes = []
        if reuse > 0:
            cache = DynamicCache(tuple((k[:, :, :reuse], v[:, :, :reuse]) for k, v in entry[1]))
            routes.append(entry[2][:reuse])
        else:
            cache = DynamicCache()
        logits = None
        if c > reuse:   # the whole prompt was cached: replay its last position's experts
            logits, r = self._forward(ids[reuse:c], cache, reuse, True, force=entry[2][reuse:c].unsqueeze(0))
            routes.append(r)
        if n > c:
            logits, r = self._forward(ids[c:], cache, c, capture, jitter=self.args.router_jitter)
            routes.append(r)
        return cache, logits, routes, reuse

    def _check_request(self, req):
        ids = req.get("input_ids")
        if ids is None and isinstance(req.get("text"), str):
            ids = self._encode(req["text"], split=False)
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise httpjson.HTTPError(400, "input_ids must be a non-empty list of token IDs")
        V = self.model.config.vocab_size
        if min(ids) < 0 or max(ids) >= V:
            raise httpjson.HTTPError(400, f"input_ids holds a token outside [0, {V})")
        sp = req.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise httpjson.HTTPError(400, "sampling_params must be an object")
        return ids, sp

    @torch.no_grad()
    def generate(self, req):
        ids, sp = self._check_request(req)
        temperature = sampling_temperature(sp)
        top_p = float(sp.get("top_p", 1.0))
        max_new = int(sp.get("max_new_tokens", 128))
        if max_new < 1:
            raise httpjson.HTTPError(400, f"sampling_params.max_new_tokens = {max_new} must be >= 1")
        stop = set(int(t) for t in (sp.get("stop_token_ids") or [])) | self.stop_ids
        if len(ids) + max_new > self.block_size:
            raise httpjson.HTTPError(400, f"prompt of {len(ids)} tokens + max_new_tokens {max_new} exceeds the context of {self.block_size}")
        want_routing = bool(req.get("return_routed_experts"))
        start_len = int(req.get("routed_experts_start_len", 0))
        gen = torch.Generator().manual_seed(int(sp["seed"])) if "seed" in sp else None
        jitter = self.args.router_jitter
        scale = temperature if temperature > 0 else 1.0   # greedy: log-probs at 1, as SGLang
        capture = want_routing or self.cache is not None

        with self.lock:
            cache, logits, routes, cached = self._prefill(ids, capture)
            out_ids, logprobs, finish = [], [], finish_length(max_new)
            pos = len(ids)
            for _ in range(max_new):
                self.stepped = time.monotonic()
                last = logits.cpu()
                if not torch.isfinite(last).all():
                    finish = finish_abort(f"non-finite logits at position {pos}")
                    break
                lp = torch.log_softmax(last / scale, dim=-1)
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
                if t in stop:
                    finish = finish_stop(t)
                    break
                if len(out_ids) == max_new:
                    break
                logits, r = self._forward([t], cache, pos, capture, jitter=jitter)
                routes.append(r)
                pos += 1
            # The last sampled token has not been through the model: as SGLang
            # and vLLM, it has no routing row (T-1 rows: positions [start, len-1)).
            routes = torch.cat(routes, dim=0) if capture else None   # (positions processed, L, k)
            if self.cache is not None and finish["type"] != "abort":
                processed = (ids + out_ids)[:routes.shape[0]]
                self.cache.insert(processed, tuple((layer.keys, layer.values) for layer in cache.layers), routes)

        meta = {"prompt_tokens": len(ids), "completion_tokens": len(out_ids), "cached_tokens": cached,
                "finish_reason": finish, "weight_version": self.weight_version}
        if req.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, out_ids)]
        if want_routing:
            self._attach_routing(meta, routes[start_len:])
        return {"text": self._decode(out_ids), "output_ids": out_ids, "meta_info": meta}

    def _attach_routing(self, meta, r):
        first = self.dropped_first < self.args.drop_routing_first
        self.dropped_first += first
        if first or self.args.drop_routing_frac > 0 and self.fault_rng.random() < self.args.drop_routing_frac:
            meta["routed_experts_dropped"] = True   # fault injection: routing "lost"
            return
        # SGLang's layout: (positions, num_hidden_layers, k) int32, dense layers zero.
        ctl = self.model.t1_routing
        moe = r.to(torch.int32).cpu().numpy()   # (positions, MoE layers, k)
        a = np.zeros((moe.shape[0], ctl.n_hidden_layers, ctl.top_k), dtype="<i4")
        a[:, ctl.moe_layers, :] = moe
        meta["routed_experts"] = base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()

    # ---- text ----------------------------------------------------------------
    def _encode(self, text, split):
        with self.tok_lock:
            return list(self.tok(text, add_special_tokens=False, split_special_tokens=split)["input_ids"])

    def _decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def tokenize(self, req):
        if not isinstance(req.get("text"), str):
            raise httpjson.HTTPError(400, "text must be a string")
        split = req.get("split_special_tokens", False)
        if not isinstance(split, bool):
            raise httpjson.HTTPError(400, "split_special_tokens must be true or false")
        # As the reference: split_special_tokens (and, for older clients,
        # add_special_tokens: false) encodes special-token text as plain text.
        # No BOS/EOS is ever added: the client concatenates pieces.
        allow = req.get("add_special_tokens", True) and not split
        ids = self._encode(req["text"], split=not allow)
        return {"tokens": ids, "count": len(ids), "max_model_len": self.block_size}

    def detokenize(self, req):
        ids = req.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise httpjson.HTTPError(400, "tokens must be a list of token IDs")
        return {"text": self._decode(ids)}

    def chat_completions(self, req):
        """OpenAI-compatible chat completions over the checkpoint's chat template."""
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise httpjson.HTTPError(400, "messages must be a non-empty list")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") or not isinstance(m.get("content"), str):
                raise httpjson.HTTPError(400, f"messages[{i}] needs a role (system, user or assistant) and string content")
        with self.tok_lock:
            ids = list(self.tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True))
        max_tokens = int(req.get("max_tokens") or 256)
        if len(ids) + max_tokens > self.block_size:
            raise httpjson.HTTPError(400, f"This model's maximum context length is {self.block_size} tokens; the messages use {len(ids)} and max_tokens {max_tokens}")
        eot = self.chat["end_of_turn_id"]
        sp = {"max_new_tokens": max_tokens, "temperature": float(req.get("temperature", 1.0)), "stop_token_ids": [eot]}
        if "seed" in req:
            sp["seed"] = req["seed"]
        out = self.generate({"input_ids": ids, "sampling_params": sp})
        got = out["output_ids"]
        content = got[:-1] if got and got[-1] in self.stop_ids | {eot} else got
        return {
            "id": "chatcmpl-t1flow", "object": "chat.completion", "model": req.get("model", self.weight_version),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self._decode(content)},
                         "finish_reason": out["meta_info"]["finish_reason"]["type"]}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(got), "total_tokens": len(ids) + len(got)},
        }

    def update_weights(self, req):
        path = req.get("model_path")
        if not path:
            raise httpjson.HTTPError(400, "model_path is required")
        with self.lock:
            try:
                self.load(path)
            except hfmoe.ChatTemplateError as e:
                raise httpjson.HTTPError(400, str(e))
            self.remember(path)
        return {"success": True, "message": f"loaded {path}", "weight_version": self.weight_version}

    def health_generate(self, _):
        if _ref.generating(self):
            return {"ok": True, "busy": True}
        self.generate({"input_ids": [min(self.stop_ids)], "sampling_params": {"max_new_tokens": 1}})
        return {"ok": True}


def _has_tokenizer(path):
    return os.path.exists(os.path.join(path, "tokenizer_config.json"))


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--model", help="Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the router jitter's noise")
    ap.add_argument("--state", help="file where the server records the checkpoint it serves; a restart serves it again")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", "--sample-dtype", dest="dtype", choices=list(hfmoe.DTYPES), default=None,
                    help="weights' dtype (default: bfloat16 on CUDA, float32 on CPU)")
    ap.add_argument("--router-jitter", type=float, default=0.0, help="std of noise added to router logits when selecting experts")
    ap.add_argument("--disable-radix-cache", action="store_true",
                    help="no prefix cache: every request re-runs (and re-routes) its whole prompt")
    ap.add_argument("--prefix-cache-tokens", type=int, default=1 << 16, help="tokens the prefix cache holds at most (LRU)")
    ap.add_argument("--drop-routing-frac", type=float, default=0.0, help="fault injection: share of responses whose routing is dropped")
    ap.add_argument("--drop-routing-first", type=int, default=0, help="fault injection: drop the routing of the first N responses that ask for it")
    ap.add_argument("--fault-seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--block-size", type=int, default=0, help="context length cap (0: the model's max_position_embeddings)")
    return ap


def main():
    args = parser().parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        eng = Engine(args)
    except (hfmoe.ChatTemplateError, FileNotFoundError, ValueError) as e:
        raise SystemExit(f"server.py: {e}")
    routes = {
        ("GET", "/health"): lambda _: {"ok": True},
        ("GET", "/health_generate"): eng.health_generate,
        ("GET", "/get_model_info"): eng.info,
        ("POST", "/generate"): eng.generate,
        ("POST", "/tokenize"): eng.tokenize,
        ("POST", "/detokenize"): eng.detokenize,
        ("POST", "/update_weights_from_disk"): eng.update_weights,
        ("POST", "/v1/chat/completions"): eng.chat_completions,
    }
    httpjson.serve(args.host, args.port, routes, "t1flow hf inference server").serve_forever()


if __name__ == "__main__":
    main()
