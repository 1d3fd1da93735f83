"""Hugging Face trainer behind the reference trainer's protocol
(docs/trainer-protocol.md): sft, critic_fit, ppo_step with R3, save, load,
init, progress, cancel; idempotency keys, each key's record committed
atomically with the weights (gpu/reference/commit.py), roll forward after a
crash. It is the reference trainer (gpu/reference/trainer.py, imported) with
the model parts replaced for HF MoE checkpoints (Qwen3-MoE, OLMoE, Mixtral):

- the policy is the checkpoint's causal LM; its MoE blocks replay the
  sampler's experts (hfmoe.py): each layer's top-k is the recorded one, its
  gate weights the live router's softmax over those experts, renormalised as
  the config says (norm_topk_prob; Mixtral always);
- the critic is a separate model: a copy of the policy's backbone (the base
  model without the LM head, routing by itself) with a scalar value head
  that reads h_t and the mean of h over the response so far (Critic),
  initialised from the policy, saved beside it as critic.safetensors; the
  head is solved by ridge least squares after each critic fit and PPO step
  (the reference's _solve_value_head);
- TITO: the batch's token IDs are trained as they are, with its loss mask;
- weights are float32 (the optimiser's too); on CUDA the forward runs under
  bfloat16 autocast (--dtype), on CPU in float32;
- state/ and saved checkpoints are HF checkpoint directories
  (save_pretrained: config.json, model*.safetensors, the tokenizer) plus
  critic.safetensors and t1flow.json (the weight version), so the server's
  /update_weights_from_disk and a restarted trainer load them as they are.

Every flag the Go supervisor passes to the reference trainer is accepted.
"""
import argparse
import copy
import hashlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(os.path.dirname(HERE), "reference")
sys.path.insert(0, REFERENCE)
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import batch as B  # noqa: E402  (gpu/reference)
import commit  # noqa: E402  (gpu/reference)
import hfmoe  # noqa: E402
import httpjson  # noqa: E402  (gpu/reference)


reference = hfmoe.reference_module("trainer")   # gpu/reference/trainer.py
M = reference.M   # gpu/reference/model.py: the critic's value range

CRITIC_FILE = "critic.safetensors"
VERSION_FILE = "t1flow.json"


class Critic(nn.Module):
    """The policy's backbone (no LM head) with a scalar value head.

    With pool (every critic the trainer makes) the head reads [h_t, a
    summary of h over the response up to t]: a language model's state at t
    serves the next token and forgets a deciding token once nothing ahead
    depends on it. The summary is the running max (op "max", every critic
    made now, as the reference's gpu/reference/model.py pool_response), which
    keeps a deciding token's mark at full strength where the running mean
    dilutes it by 1/t. A max-pooled critic carries the buffer value_pool_max
    in its state dict, so its files say which it is (critic.safetensors, the
    sharded export, the DCP state); one saved without it reads the mean, as
    it was trained. The response starts at start (B,), the input position of
    the first loss token (the last token of the assistant's header), which
    the trainer reads from the batch's loss mask: this model's tokens do not
    say where its chat template's header is. A critic saved before the head
    read any summary (its value_head is hidden_size wide) loads with pool off
    and reads h_t alone (Trainer._critic_with)."""

    def __init__(self, backbone, pool=True, op="max"):
        super().__init__()
        if op not in ("mean", "max"):
            raise ValueError(f"value pool op {op!r}: want mean or max")
        self.backbone = backbone
        self.pool = pool
        self.op = op if pool else None
        if self.op == "max":
            self.register_buffer(POOL_MAX_MARK, torch.ones(1))
        width = backbone.config.hidden_size * (2 if pool else 1)
        self.value_head = nn.Linear(width, 1)
        self.register_buffer(M.VALUE_RANGE, M.empty_range())   # the returns it was fitted on (the reference's)

    def forward(self, ids, start=None, features=False):
        """Values (B, T), or with features what the value head reads (B, T,
        width). Features go through forward too, so a sharded critic
        (FSDP2's hooks on forward) gathers its parameters for them."""
        h = self.backbone(input_ids=ids, use_cache=False).last_hidden_state
        if self.pool:
            h = pool_response(h, start, self.op)
        return h if features else self.value_head(h).squeeze(-1)


# The state-dict key that marks a critic whose head reads the running max.
POOL_MAX_MARK = "value_pool_max"


def pool_response(h, start, op="mean"):
    """[h_t, summary of h over positions start..t] (B, T, 2C), the summary
    the running mean (op "mean") or max ("max"); zeros before start, and
    start 0 when None. Taken in float32 (under bfloat16 autocast the states
    are bfloat16)."""
    B, T = h.shape[:2]
    if start is None:
        start = torch.zeros(B, dtype=torch.long, device=h.device)
    hf = h.float()
    started = (torch.arange(T, device=h.device)[None, :] >= start.to(h.device)[:, None]).unsqueeze(-1)
    if op == "max":
        low = torch.full_like(hf, torch.finfo(hf.dtype).min)
        peak = torch.cummax(torch.where(started, hf, low), 1).values
        summary = torch.where(started, peak, torch.zeros_like(hf))
    elif op == "mean":
        on = started.to(hf.dtype)
        summary = (hf * on).cumsum(1) / on.cumsum(1).clamp(min=1)
    else:
        raise ValueError(f"value pool op {op!r}: want mean or max")
    return torch.cat([hf, summary], dim=-1).to(h.dtype)


def response_start(mask):
    """Each row's first loss position (B,), 0 in a row without one or without a mask."""
    if mask is None:
        return None
    return torch.where(mask.any(1), mask.to(torch.int8).argmax(1), torch.zeros_like(mask[:, 0], dtype=torch.long))


def critic_state(critic, sd, where):
    """Load the state dict sd (from where, named in errors) into critic."""
    missing, unexpected = critic.load_state_dict(sd, strict=False)
    missing = M.required_missing(missing)   # a critic saved before the range: not fitted yet
    if missing or unexpected:
        raise ValueError(f"{where}: missing {missing}, unexpected {unexpected}")


def pooled_head(width, hidden, where):
    """Whether a saved value head of this width reads the response mean
    (2 x hidden) or h_t alone (hidden, a critic saved before the mean)."""
    if width == 2 * hidden:
        return True
    if width == hidden:
        return False
    raise ValueError(f"{where}: the critic's value_head reads {width} features; this model's critic reads "
                     f"{2 * hidden} (h_t and the response mean) or {hidden} (h_t, a critic saved before the mean)")


class Trainer(reference.Trainer):
    def __init__(self, args):
        self._options(args)
        super().__init__(args)

    def _options(self, args):
        self.dtype = getattr(args, "dtype", None) or hfmoe.default_dtype(args.device)
        self.amp = self.dtype == "bfloat16"
        self.grad_ckpt = bool(getattr(args, "gradient_checkpointing", False))
        init = getattr(args, "init", None)
        # Where the architecture (config.json) and tokenizer come from for a
        # random init: --model, else --init; a restart reads them from state/.
        self.arch_dir = getattr(args, "model", None) or (init if init and init != "random" else None)
        self.tok = None

    # ---- models --------------------------------------------------------------
    def _prepare(self, model):
        if self.grad_ckpt and getattr(model, "supports_gradient_checkpointing", False):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return self._place(model)

    def _place(self, model):
        return model.to(self.device)

    def _actor_from(self, path):
        from transformers import AutoModelForCausalLM

        hfmoe.check_dir(path)
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="sdpa")
        hfmoe.install_routing(m)
        return self._prepare(m)

    def _random_actor(self, seed):
        from transformers import AutoConfig, AutoModelForCausalLM

        src = self.arch_dir or (self.state_dir if self.store.has_state() else None)
        if not src:
            raise ValueError("trainer: --init DIR (a Hugging Face checkpoint) or --model DIR (its architecture, "
                             "for a random init) is required")
        hfmoe.check_dir(src)
        cfg = AutoConfig.from_pretrained(src)
        torch.manual_seed(seed)
        m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32, attn_implementation="sdpa")
        hfmoe.install_routing(m)
        self._tokenizer_from(src)
        return self._prepare(m)

    def _tokenizer_from(self, path):
        if os.path.exists(os.path.join(path, "tokenizer_config.json")):
            self.tok = hfmoe.load_tokenizer(path)

    def _init(self, init, seed):
        if init and init != "random":
            self.actor = self._actor_from(init)
            self._tokenizer_from(init)
            self.critic = self._critic_from(init)
        else:
            self.actor = self._random_actor(seed)
            self.critic = self._critic_from(None)
        self.version = 0
        self._new_optimizers()
        self._commit_state()

    def _critic_from(self, ckpt):
        """critic.safetensors from ckpt when there is one, else the policy's backbone with a fresh value head."""
        path = os.path.join(ckpt, CRITIC_FILE) if ckpt else None
        sd = None
        if path and os.path.exists(path):
            from safetensors.torch import load_file

            sd = load_file(path)
        return self._critic_with(sd, path)

    def _critic_with(self, sd, where, pool=None, op="max"):
        """A critic on a copy of the policy's backbone: with the state dict sd
        (read from where), its head as wide as sd's and pooled as sd's marker
        says; without, a fresh head (pool and op unless said)."""
        body = copy.deepcopy(self.actor.get_decoder())
        if sd is not None and "value_head.weight" in sd:
            pool = pooled_head(sd["value_head.weight"].shape[-1], body.config.hidden_size, where)
            op = "max" if POOL_MAX_MARK in sd else "mean"
        critic = Critic(body, pool=True if pool is None else pool, op=op)
        if sd is not None:
            critic_state(critic, sd, where)
        else:
            g = torch.Generator().manual_seed(0)   # the global RNG (minibatch order) is left alone
            with torch.no_grad():
                critic.value_head.weight.copy_(torch.randn(critic.value_head.weight.shape, generator=g) * 0.02)
                critic.value_head.bias.zero_()
        return self._place(critic)

    def _facts(self):
        return hfmoe.model_facts(self.actor)

    def _routing_dims(self):
        f = self._facts()
        return f["num_layers"], f["num_experts"], f["top_k"]

    # ---- state ---------------------------------------------------------------
    def _write_checkpoint(self, d, crash=lambda _: None):
        """An HF checkpoint directory: the policy (save_pretrained), its
        tokenizer, the critic and the weight version."""
        self.actor.save_pretrained(d, safe_serialization=True)
        if self.tok is not None:
            self.tok.save_pretrained(d)
        from safetensors.torch import save_file

        save_file({k: v.detach().contiguous().cpu() for k, v in self.critic.state_dict().items()}, os.path.join(d, CRITIC_FILE))
        with open(os.path.join(d, VERSION_FILE), "w") as f:
            json.dump({"version": self.version, "weight_version": f"v{self.version}", "backend": "hf"}, f)
        crash("staged-weights")

    def _write_state(self, d, crash):
        self._write_checkpoint(d, crash)
        torch.save({"actor": self.actor_opt.state_dict(), "critic": self.critic_opt.state_dict()}, os.path.join(d, "optim.pt"))
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"version": self.version}, f)

    def _load_state(self):
        self.actor = self._actor_from(self.state_dir)
        self._tokenizer_from(self.state_dir)
        self.critic = self._critic_from(self.state_dir)
        self._new_optimizers()
        opt = torch.load(os.path.join(self.state_dir, "optim.pt"), map_location=self.device, weights_only=True)
        self.actor_opt.load_state_dict(opt["actor"])
        self.critic_opt.load_state_dict(opt["critic"])
        with open(os.path.join(self.state_dir, "state.json")) as f:
            self.version = json.load(f)["version"]

    # ---- forward -------------------------------------------------------------
    def _autocast(self):
        return torch.autocast(device_type=torch.device(self.device).type, dtype=torch.bfloat16, enabled=self.amp)

    def _logp(self, inputs, targets, routing, temperature=None):
        """Log-prob and entropy of each target at the sampling temperature.
        routing (B, T, L, k) replays the sampler's experts (R3); None routes
        afresh. The forced experts stay set after the call: gradient
        checkpointing re-runs the forward during backward and must replay the
        same experts (the next call replaces them)."""
        self.actor.t1_routing.force = routing
        with self._autocast():
            logits = self.actor(input_ids=inputs, use_cache=False).logits
        logits = logits.float()
        if temperature is not None:
            logits = logits / temperature
        logp_all = F.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def _values(self, inputs, routing=None, mask=None):
        with self._autocast():
            v = self.critic(inputs, response_start(mask))
        return v.float()

    def _value_features(self, inputs, mask):
        with self._autocast():
            x = self.critic(inputs, response_start(mask), features=True)
        return x.float()

    def _value_head(self):
        return self.critic.value_head

    # The value head's ridge, chosen per solve by 4-fold cross-validation
    # over the batch's trajectories (the reference's one ridge, 3e-4, first):
    # the hf models' widths and answer lengths differ from model to model, and
    # on the tiny Qwen3-MoE's early-token batch (tests/test_critic.py) 3e-4
    # overfits 16 trajectories (held out 0.79, in sample 0.99), 3e-2 does best
    # (0.90) (docs/learning.md, "The critic").
    RIDGES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)

    def _load_batch(self, req, need_routing, allow_seen=False):
        d = req.get("batch_dir")
        if not d:
            raise httpjson.HTTPError(400, "batch_dir is required")
        f = self._facts()
        need_routing = need_routing and f["num_layers"] > 0   # a dense model has no routing: R3 off
        try:
            meta, trajs = B.load(d, f["num_layers"], f["num_experts"], f["top_k"], need_routing, allow_seen)
        except B.RoutingError as e:
            raise httpjson.HTTPError(422, f"RoutingMissing: {e}")
        except (ValueError, FileNotFoundError) as e:
            raise httpjson.HTTPError(400, str(e))
        V = f["vocab_size"]
        for t in trajs:
            if int(t.tokens.min()) < 0 or int(t.tokens.max()) >= V:
                raise httpjson.HTTPError(400, f"{t.name}: tokens hold an ID outside the model's vocabulary [0, {V})")
        return meta, trajs

    def logprob_gaps(self, p):
        """As the reference's: |trainer - sampler| log-prob of each loss token
        with R3 and with the trainer's own routing, and where the trainer
        would route differently."""
        if p.routing is None:   # dense: nothing to replay, the two gaps are one
            with torch.no_grad():
                lp, _ = self._logp(p.inputs, p.targets, None, p.temperature)
            gap = (lp - p.sampler_logp)[p.mask].abs()
            return {"replayed": lp, "gap_replay": gap, "gap_free": gap, "flips": torch.zeros_like(gap, dtype=torch.bool)}
        with torch.no_grad():
            replayed, _ = self._logp(p.inputs, p.targets, p.routing, p.temperature)
            self._beat()
            with hfmoe.routing(self.actor, capture=True) as cap:
                free, _ = self._logp(p.inputs, p.targets, None, p.temperature)
            self._beat()
            own = hfmoe.stacked(cap, self.actor.t1_routing.n_layers)
        flips = (own.sort(-1).values != p.routing.sort(-1).values).any(-1).any(-1)
        return {"replayed": replayed, "gap_replay": (replayed - p.sampler_logp)[p.mask].abs(),
                "gap_free": (free - p.sampler_logp)[p.mask].abs(), "flips": flips[p.mask]}

    def ppo_step(self, req):
        out = super().ppo_step(req)
        self.actor.t1_routing.force = None
        return out

    # ---- checkpoints ---------------------------------------------------------
    def _save(self, d):
        tmp = d.rstrip("/") + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        self._write_checkpoint(tmp)
        files = []
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as f:
                b = f.read()
            files.append({"name": name, "sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)})
        with open(os.path.join(tmp, "config.json")) as f:
            config = json.load(f)
        manifest = {"version": self.version, "weight_version": f"v{self.version}", "files": files, "config": config}
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)
        shutil.rmtree(d, ignore_errors=True)
        os.replace(tmp, d)
        return manifest

    def _load(self, d):
        self.actor = self._actor_from(d)
        self._tokenizer_from(d)
        self.critic = self._critic_from(d)
        try:
            with open(os.path.join(d, VERSION_FILE)) as f:
                self.version = int(json.load(f)["version"])
        except (OSError, ValueError, KeyError, TypeError):
            self.version = 0
        self._new_optimizers()
        self._commit_state()
        self.log(f"load {d} version={self.version}")
        return {"version": self.version, "weight_version": f"v{self.version}"}

    def health(self, req):
        h = super().health(req)
        h.update({"backend": "hf", "dtype": self.dtype, "gradient_checkpointing": self.grad_ckpt})
        return h


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--workdir", required=True, help="state, idempotency records and ops.log live here")
    ap.add_argument("--init", default="random", help="Hugging Face checkpoint directory, or 'random' (needs --model)")
    ap.add_argument("--model", help="checkpoint directory whose config and tokenizer a random init (--init random, /init) uses")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=list(hfmoe.DTYPES), default=None,
                    help="compute dtype: bfloat16 autocast over float32 weights (default on CUDA), or float32 (default on CPU)")
    ap.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward (less memory)")
    ap.add_argument("--cpu-offload", action="store_true",
                    help="under torchrun: keep the sharded parameters, gradients and Adam states in CPU memory (FSDP2 offload)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--slow-ms", type=int, default=0, help="sleep after each minibatch (tests widen crash windows)")
    ap.add_argument("--hang-once", default="", help="tests: while this file exists, hang after the second minibatch of an operation (and remove it)")
    ap.add_argument("--port-file", help="write the bound port here once listening")
    ap.add_argument("--crash-at", choices=commit.CRASH_POINTS,
                    help="TESTS ONLY: kill this process (SIGKILL) at this step of a training operation's commit")
    ap.add_argument("--crash-rank", type=int, default=0, help="TESTS ONLY: under torchrun, the rank --crash-at kills")
    return ap


def main():
    args = parser().parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import sharded

    if sharded.launched():   # N ranks under torchrun (sharded.py); rank 0 serves
        return sharded.main(args, lambda tr: serve(tr, args))
    try:
        tr = Trainer(args)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"trainer.py: {e}")
    serve(tr, args)


def serve(tr, args):
    """The protocol's routes over HTTP, until the process ends."""
    routes = {
        ("GET", "/health"): tr.health,
        ("GET", "/progress"): lambda _: tr.progress,
        ("POST", "/sft"): lambda r: tr._run("sft", r, tr.sft),
        ("POST", "/critic_fit"): lambda r: tr._run("critic_fit", r, tr.critic_fit),
        ("POST", "/ppo_step"): lambda r: tr._run("ppo_step", r, tr.ppo_step),
        ("POST", "/save"): tr.save,
        ("POST", "/load"): tr.load,
        ("POST", "/init"): tr.init,
        ("POST", "/cancel"): tr.cancel,
        ("POST", "/score"): tr.score,
    }
    srv = httpjson.serve(args.host, args.port, routes, "t1flow hf trainer")
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(srv.server_address[1]))
        os.replace(tmp, args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
