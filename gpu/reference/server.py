"""Reference inference server speaking the subset of SGLang's native API that
t1flow's rollouts use: /generate (token IDs in and out, log-probs, routed
experts), /tokenize, /detokenize, /update_weights_from_disk, /get_model_info,
/health, /health_generate.

To reproduce the train-inference mismatch, it can sample in bfloat16
(--sample-dtype) and jitter the router's selection (--router-jitter). For
fault-injection tests it can drop routing from a fraction of responses
(--drop-routing-frac).
"""
import argparse
import base64
import copy
import json
import os
import random
import threading

import numpy as np
import torch

import httpjson
import model as M

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class Engine:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.tok = M.Tokenizer()
        self.fault_rng = random.Random(args.fault_seed)
        self.device = args.device
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
        }

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
        temperature = float(sp.get("temperature", 1.0))
        top_p = float(sp.get("top_p", 1.0))
        max_new = int(sp.get("max_new_tokens", 128))
        stop_ids = set(sp.get("stop_token_ids") or []) | {self.tok.eos}
        if len(ids) + max_new > self.model.cfg.block_size:
            raise httpjson.HTTPError(400, f"prompt of {len(ids)} tokens + max_new_tokens {max_new} exceeds the context of {self.model.cfg.block_size}")
        want_routing = bool(req.get("return_routed_experts"))
        start_len = int(req.get("routed_experts_start_len", 0))
        gen = torch.Generator().manual_seed(int(sp["seed"])) if "seed" in sp else None
        jitter = self.args.router_jitter

        with self.lock:
            caches = [{} for _ in range(self.model.cfg.n_layer)]
            x = torch.tensor([ids], device=self.device)
            logits, routing = self.model(x, caches=caches, jitter=jitter)
            routes = [routing[0]]
            out_ids, logprobs, finish = [], [], {"type": "length", "length": max_new}
            pos = len(ids)
            for _ in range(max_new):
                last = logits[0, -1].float()
                lp = torch.log_softmax(last / max(temperature, 1e-6), dim=-1)
                if temperature <= 0:
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
                    finish = {"type": "stop", "matched": t}
                    break
                if len(out_ids) == max_new:
                    break
                logits, routing = self.model(torch.tensor([[t]], device=self.device), caches=caches, start=pos, jitter=jitter)
                routes.append(routing[0])
                pos += 1
            if want_routing and out_ids:
                # The last sampled token has not been through the model yet:
                # process it too, so routing covers every position.
                _, routing = self.model(torch.tensor([[out_ids[-1]]], device=self.device), caches=caches, start=pos, jitter=jitter)
                routes.append(routing[0])

        meta = {
            "prompt_tokens": len(ids), "completion_tokens": len(out_ids), "finish_reason": finish,
            "weight_version": self.weight_version,
        }
        if req.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, out_ids)]
        if want_routing:
            r = torch.cat(routes, dim=0)[start_len:].to(torch.int32).cpu().numpy()  # (positions, L, k)
            if self.args.drop_routing_frac > 0 and self.fault_rng.random() < self.args.drop_routing_frac:
                meta["routed_experts_dropped"] = True  # fault injection: routing "lost"
            else:
                meta["routed_experts"] = base64.b64encode(np.ascontiguousarray(r).tobytes()).decode()
        return {"text": self.tok.decode(out_ids), "output_ids": out_ids, "meta_info": meta}

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
        finish = "stop" if out["meta_info"]["finish_reason"]["type"] == "stop" else "length"
        return {
            "id": "chatcmpl-t1flow", "object": "chat.completion", "model": req.get("model", self.weight_version),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.tok.decode(ids_out)}, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out["output_ids"]),
                      "total_tokens": len(ids) + len(out["output_ids"])},
        }

    def tokenize(self, req):
        if not isinstance(req.get("text"), str):
            raise httpjson.HTTPError(400, "text must be a string")
        ids = self.tok.encode(req["text"], allow_special=req.get("add_special_tokens", True))
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
        self.generate({"input_ids": [self.tok.bos], "sampling_params": {"max_new_tokens": 1}})
        return {"ok": True}


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
    ap.add_argument("--drop-routing-frac", type=float, default=0.0, help="fault injection: share of responses whose routing is dropped")
    ap.add_argument("--fault-seed", type=int, default=1)
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
