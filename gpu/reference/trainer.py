"""Reference trainer process: SFT, critic fit and PPO with R3 on the reference
MoE policy, behind t1flow's trainer protocol (docs/trainer-protocol.md).

One process per GPU group. Every training operation carries an idempotency
key: its result is recorded in the same atomic commit as the new weights
(commit.py), and a repeated key returns the recorded result without training
again. After a crash the process restarts from the last committed state.
"""
import argparse
import copy
import hashlib
import json
import os
import shutil
import sys
import threading
import time

import torch
import torch.nn.functional as F

import batch as B
import commit
import httpjson
import model as M
import ppo
import safetensors_io
import epochs


class Cancelled(httpjson.HTTPError):
    def __init__(self, message):
        super().__init__(409, message)


class Trainer:
    def __init__(self, args):
        self.args = args
        self.device = args.device
        self.workdir = os.path.abspath(args.workdir)
        self.lock = threading.Lock()          # one training operation at a time
        self.progress = {"op": None, "key": None, "done": 0, "total": 0, "metrics": {}}
        self.cancel_key = None
        self.store = commit.Store(self.workdir, getattr(args, "crash_at", None))
        self.state_dir = self.store.state_dir
        if self.store.has_state():
            self._load_state()
            self.log(f"restart: resumed version {self.version} from {self.state_dir}")
        else:
            self._init(args.init, args.seed)

    # ---- state -------------------------------------------------------------
    def log(self, line):
        self.store.log(line)

    def _init(self, init, seed):
        if init and init != "random":
            self.actor, _ = M.load_checkpoint(init, "model", self.device)
            self.critic = self._critic_from(init)
        else:
            torch.manual_seed(seed)
            block = getattr(self.args, "block_size", 0)   # as the inference server's --block-size
            self.actor = M.Transformer(M.Config(block_size=block) if block else M.Config()).to(self.device)
            self.critic = self._critic_from(None)
        self.version = 0
        self._new_optimizers()
        self._commit_state()

    def _critic_from(self, ckpt):
        """The critic is a full copy of the policy's architecture with a scalar head."""
        if ckpt and os.path.exists(os.path.join(ckpt, "critic.safetensors")):
            c, _ = M.load_checkpoint(ckpt, "critic", self.device)
            return c
        cfg = copy.deepcopy(self.actor.cfg)
        cfg.value_head = True
        cfg.value_pool = True   # the head reads the response so far too (model.pool_response)
        cfg.value_pool_op = "max"
        critic = M.Transformer(cfg).to(self.device)
        body = {k: v for k, v in self.actor.state_dict().items() if not k.startswith("head.")}
        critic.load_state_dict(body, strict=False)
        return critic

    def _new_optimizers(self):
        self._fresh_actor_optimizer()
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1.5e-5)

    def _commit_state(self, rec=None):
        """Write the whole training state to state.new (with rec, the record of
        the training operation that made it), then swap it in."""
        self.store.commit(self._write_state, rec)

    def _write_state(self, d, crash):
        M.save_checkpoint(self.actor, d, "actor", {"version": f"v{self.version}"})
        M.save_checkpoint(self.critic, d, "critic")
        crash("staged-weights")
        torch.save({"actor": self.actor_opt.state_dict(), "critic": self.critic_opt.state_dict()}, os.path.join(d, "optim.pt"))
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"version": self.version}, f)

    def _load_state(self):
        self.actor, _ = M.load_checkpoint(self.state_dir, "actor", self.device)
        self.critic, _ = M.load_checkpoint(self.state_dir, "critic", self.device)
        self._new_optimizers()
        opt = torch.load(os.path.join(self.state_dir, "optim.pt"), map_location=self.device)
        self.actor_opt.load_state_dict(opt["actor"])
        self.critic_opt.load_state_dict(opt["critic"])
        with open(os.path.join(self.state_dir, "state.json")) as f:
            self.version = json.load(f)["version"]

    # ---- idempotency -------------------------------------------------------
    def _run(self, op, req, fn):
        key = req.get("key")
        if not isinstance(key, str) or not key:
            raise httpjson.HTTPError(400, f"{op}: key (the idempotency key: campaign/stage/step) is required")
        # Waiting on the lock also makes a retry of a running key wait for it.
        with self.lock:
            saved = self.store.lookup(key)
            if saved is not None:
                if saved["op"] != op:
                    raise httpjson.HTTPError(409, f"key {key!r} was used for {saved['op']}, not {op}")
                saved["result"]["replayed"] = True
                epochs.drop(self.workdir, key)   # a crash after the commit may have left it
                self.log(f"replay {op} {key}")
                return saved["result"]
            self.progress = {"op": op, "key": key, "done": 0, "total": 0, "beat": 0, "metrics": {}}
            self.cancel_key = None
            self.log(f"begin {op} {key}")
            t0 = time.time()
            try:
                result = fn(req)
            except BaseException:
                # Nothing of a failed or cancelled step survives: back to the last commit.
                self._load_state()
                self.log(f"abort {op} {key}")
                raise
            finally:
                self.progress["op"] = None
            self.store.crash("trained")
            self.version += 1
            result.update({"version": self.version, "weight_version": f"v{self.version}", "seconds": time.time() - t0, "replayed": False})
            # JSON has no NaN: an undefined metric (e.g. explained variance of
            # constant returns) is null.
            result = {k: (None if isinstance(v, float) and v != v else v) for k, v in result.items()}
            rec = {"op": op, "key": key, "result": result}
            try:
                self._commit_state(rec)   # weights and record in one commit
            except BaseException:
                # Whether it got past the commit point, the state on disk says:
                # a retry replays the record or trains once.
                self._load_state()
                raise
            self.store.crash("committed")
            self.store.finish(rec)        # ops/ record, ops.log commit line
            epochs.drop(self.workdir, key)
            if self.args.slow_ms:
                time.sleep(self.args.slow_ms / 1000)   # for crash tests: widen the window before the reply
            return dict(result)

    def _beat(self):
        """Work between ticks (a whole-batch forward before the first
        minibatch, the actor's half of one): the watchdog counts a new beat as
        progress, so an operation whose first minibatch outlasts the stall
        window on a slow machine is not restarted again and again."""
        self.progress["beat"] = self.progress.get("beat", 0) + 1

    def _tick(self, done, total, **metrics):
        self.progress.update(done=done, total=total, metrics=metrics)
        if self.cancel_key is not None and self.cancel_key == self.progress.get("key"):
            raise Cancelled(f"{self.progress['op']} {self.progress['key']} cancelled")
        if self.args.slow_ms:
            time.sleep(self.args.slow_ms / 1000)   # for crash tests: widen the window
        hang = getattr(self.args, "hang_once", None)   # absent in in-process tests
        if hang and done >= 2 and os.path.exists(hang):
            # For stall tests: hang mid-operation, still answering /progress
            # and /health, until killed; the file goes, so a restart does not.
            os.remove(hang)
            self.log(f"hanging in {self.progress['op']} {self.progress['key']} ({hang})")
            while True:
                time.sleep(1)

    # ---- forward helpers ---------------------------------------------------
    def _logp(self, inputs, targets, routing, temperature=None):
        """Log-prob and entropy of each target under the policy at the sampling
        temperature (B, 1, 1): the distribution the sampler actually drew from."""
        logits, _ = self.actor(inputs, routing=routing)
        logits = logits.float()
        if temperature is not None:
            logits = logits / temperature
        logp_all = F.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    def _load_batch(self, req, need_routing, allow_seen=False):
        d = req.get("batch_dir")
        if not d:
            raise httpjson.HTTPError(400, "batch_dir is required")
        c = self.actor.cfg
        try:
            return B.load(d, c.n_layer, c.n_experts, c.top_k, need_routing, allow_seen)
        except B.RoutingError as e:
            raise httpjson.HTTPError(422, f"RoutingMissing: {e}")
        except (ValueError, FileNotFoundError) as e:
            raise httpjson.HTTPError(400, str(e))

    def _hyper(self, req):
        try:
            return ppo.Hyper.from_dict(req.get("hyper"), req.get("preset"))
        except (ValueError, TypeError) as e:
            raise httpjson.HTTPError(400, str(e))

    @staticmethod
    def _set_lr(opt, lr):
        for g in opt.param_groups:
            g["lr"] = lr

    def _advantages(self, trajs, values, mask, h):
        """Per trajectory: the reward on its last loss token, GAE over loss
        tokens, summed in float64: in float32 the telescoping sum over a long
        answer leaves the return off the reward (1.0000006 for 1)."""
        adv = torch.zeros_like(values)
        ret = torch.zeros_like(values)
        for i, t in enumerate(trajs):
            idx = mask[i].nonzero(as_tuple=True)[0]
            r = torch.zeros(idx.shape[0], dtype=torch.float64, device=values.device)
            r[-1] = t.reward
            a, g = ppo.gae(r, values[i, idx].double(), h.gamma, h.gae_lambda)
            adv[i, idx], ret[i, idx] = a.to(adv.dtype), g.to(ret.dtype)
        return adv, ret

    def _minibatches(self, n, k, cap=8, gen=None):
        k = max(k, (n + cap - 1) // cap)  # never more than cap trajectories at once
        order = torch.randperm(n, generator=gen).tolist()
        size = max(1, (n + k - 1) // k)
        return [order[i:i + size] for i in range(0, n, size)]

    # ---- operations --------------------------------------------------------
    def _epochs(self, op, req, h, model, opt, n, train, metric):
        """Epochs of minibatches over n trajectories; train(mb) runs one and
        returns (loss, tokens). Each finished epoch but the last is saved
        under the key's progress directory (epochs.py), so a retry of the
        key after a crash goes on from the last saved epoch instead of from
        zero, to the same weights: the minibatch order comes from a generator
        seeded by the key, saved with the epoch. Returns (losses, tokens)."""
        key = req["key"]
        total = h.epochs * len(self._minibatches(n, h.minibatches, h.max_minibatch))
        gen = torch.Generator().manual_seed(int(hashlib.sha256(key.encode()).hexdigest()[:15], 16))
        prog = self._progress(req)
        base_lr = opt.param_groups[0]["lr"]   # set by the caller (_set_lr), read before a saved epoch's optimizer state replaces it
        done = prog.load(model, opt, gen)
        first, step, losses, tokens = 1, 0, [], 0
        if done:
            first, step, losses, tokens = done["epoch"] + 1, done["step"], done["losses"], done["tokens"]
            self.log(f"resume {op} {key} after epoch {done['epoch']}/{h.epochs}")
        model.train()
        for epoch in range(first, h.epochs + 1):
            for mb in self._minibatches(n, h.minibatches, h.max_minibatch, gen):
                self._set_lr(opt, ppo.scheduled_lr(base_lr, h.lr_schedule, step, total))
                loss, tok = train(mb)
                losses.append(loss)
                tokens += tok
                step += 1
                self._tick(step, total, **{metric: loss})
            if epoch < h.epochs:
                prog.save(model, opt, gen, {"epoch": epoch, "step": step, "losses": losses, "tokens": tokens})
                self.log(f"{op} {key} epoch {epoch}/{h.epochs} saved")
                self.store.crash(f"{op}-epoch")
        return losses, tokens

    def _progress(self, req):
        """Where _epochs saves finished epochs (epochs.py)."""
        return epochs.Progress(self.workdir, req, self.version)

    def sft(self, req):
        """Supervised fine-tuning; a crash loses at most the epoch in flight (_epochs)."""
        h = self._hyper(req)
        _, trajs = self._load_batch(req, need_routing=False)
        self._set_lr(self.actor_opt, h.actor_lr)
        inputs, targets, mask = B.pad(trajs, self.device)[:3]   # SFT targets are not samples: temperature 1

        def train(mb):
            logp, _ = self._logp(inputs[mb], targets[mb], None)
            m = mask[mb]
            loss = -(logp[m]).mean()
            self.actor_opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.actor.parameters(), h.max_grad_norm)
            self.actor_opt.step()
            return float(loss), int(m.sum())
        losses, tokens = self._epochs("sft", req, h, self.actor, self.actor_opt, len(trajs), train, "loss")
        self._critic_from_policy()
        self._fresh_actor_optimizer()
        return {"loss": losses[-1], "loss_first": losses[0], "tokens": tokens, "trajectories": len(trajs),
                "critic": "from the SFT policy", "actor_optimizer": "fresh"}

    def _fresh_actor_optimizer(self):
        """The actor's optimizer, fresh (each operation sets its learning
        rate). SFT ends with one: RL starts from the SFT policy as it does
        where RL is a job of its own started from the SFT checkpoint. Kept,
        SFT's Adam moments would carry into PPO's first updates (about 0.43
        of its momentum after step 1's eight updates, its second moments for
        about a thousand) (docs/learning.md)."""
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=1e-6)

    def _critic_from_policy(self):
        """The critic starts where the recipe starts it: a copy of the SFT
        policy's body with a fresh value head (and a fresh optimizer). SFT
        trains only the actor, so a critic copied from the init before it
        would warm up on a body that never learned to read the format the
        policy writes (held-out EV 0.82 against 0.94: tests/test_critic.py)."""
        with torch.random.fork_rng(devices=[]):   # the same head on every retry; the global RNG is left alone
            torch.manual_seed(0)
            self.critic = self._critic_from(None)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1.5e-5)

    def _values(self, inputs, routing=None, mask=None):
        """The critic's value at each position. mask (the loss tokens) says
        where the response starts for a critic that cannot tell from the
        tokens (gpu/hf's); this one's pool_response finds <|assistant|>."""
        v, _ = self.critic(inputs)
        return v.float()

    def _value_range(self):
        """The critic's VALUE_RANGE buffer, or None for a critic without one."""
        return getattr(self.critic, M.VALUE_RANGE, None)

    def _baseline(self, inputs, mask):
        """The critic's values where they stand in for a return (the
        advantage's baseline, the explained variance), clipped to the range
        of the returns it has been fitted on (model.clip_to_range), and the
        fraction of the loss tokens that were clipped. Training reads
        _values: a clipped value has no gradient to learn from."""
        with torch.no_grad():
            v = self._values(inputs, mask=mask)
        clipped = M.clip_to_range(v, self._value_range())
        n = int(mask.sum())
        return clipped, (int((clipped != v)[mask].sum()) / n if n else 0.0)

    def _fitted_on(self, returns):
        """The critic has been fitted on these returns: its range covers them."""
        r = self._value_range()
        if r is not None:
            M.widen_range(r, returns)

    def critic_fit(self, req):
        """The critic fitted to the batch's returns under the critic it
        starts from; a crash loses at most the epoch in flight (_epochs).
        explained_variance_before is the starting critic's on the rows not
        marked seen (held out from every fit before: a warm-up fits each
        round on every round's rollouts, the earlier ones marked seen),
        explained_variance the fitted critic's on the whole batch."""
        h = self._hyper(req)
        _, trajs = self._load_batch(req, need_routing=False, allow_seen=True)
        self._set_lr(self.critic_opt, h.critic_lr)
        p = B.pad(trajs, self.device)
        inputs, mask = p.inputs, p.mask
        held = torch.tensor([not t.seen for t in trajs], device=mask.device)
        if not held.any():
            raise httpjson.HTTPError(400, "critic_fit: every trajectory is marked seen: nothing is held out for explained_variance_before")
        v0, clipped_before = self._baseline(inputs, mask)   # before any saved epoch is loaded: the committed critic's
        self._beat()
        _, ret = self._advantages(trajs, v0, mask, h)
        before = mask & held[:, None]   # the rows the critic has not been fitted on (a warm-up's new round)
        ev_before = ppo.explained_variance(v0[before], ret[before])
        # The most any value reading only the answer so far explains of the new round: ev_before's ceiling.
        ceiling = ppo.prefix_ceiling_ev(inputs, mask, ret, held)

        def train(mb):
            v = self._values(inputs[mb], mask=mask[mb])
            loss = ppo.value_loss(v[mask[mb]], ret[mb][mask[mb]])
            self.critic_opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), h.max_grad_norm)
            self.critic_opt.step()
            return float(loss), 0
        losses, _ = self._epochs("critic_fit", req, h, self.critic, self.critic_opt, len(trajs), train, "value_loss")
        self._solve_value_head(inputs, mask, ret)
        self._fitted_on(ret[mask])
        v1, _ = self._baseline(inputs, mask)
        ev_after = ppo.explained_variance(v1[mask], ret[mask])
        return {"value_loss": losses[-1], "explained_variance_before": ev_before, "explained_variance": ev_after,
                "ceiling_ev_before": ceiling, "value_clipped_before": clipped_before, "value_range": self._range_out(),
                "trajectories": len(trajs), "held_out": int(held.sum()), "tokens": int(mask.sum())}

    def _range_out(self):
        """The critic's range for a result: [lo, hi], or None before any fit."""
        b = M.range_bounds(self._value_range())
        return None if b is None else list(b)

    RIDGE = 3e-4   # per fitted value: the least-squares head's ridge (docs/learning.md)

    def _solve_value_head(self, inputs, mask, ret):
        """Set the value head to the ridge least-squares fit of the batch's
        returns on the features it reads, after the gradient steps (critic_fit's
        epochs, a PPO step's updates) have moved the body. A fresh head's
        random outputs (std about 0.5 against returns of std 0.27 on
        write-hello) are noise that 20 Adam steps at 1e-3 do not even cancel
        (EV in sample -4.2 after 5 epochs of the head alone, -0.16 after 30),
        and 4 Adam steps at the small preset's 1e-3 undo a solved head (held
        out 0.54 to -0.66); the solve is exact for the head and costs one
        forward. It runs after the last epoch, so a retry resumed from a saved
        epoch ends the same. gpu/hf's critic gives its features and takes
        the head through _value_features and _set_value_head."""
        with torch.no_grad():
            x = self._value_features(inputs, mask)
            if x is None:
                return
            self._beat()
            x = x[mask].double()
            x = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], 1)
            y = ret[mask].double()
            rows = mask.nonzero()[:, 0]
            folds = self.FOLDS if self.RIDGES and int(rows.max()) + 1 >= self.FOLDS else 1
            parts = [gram(x[rows % folds == k], y[rows % folds == k]) for k in range(folds)]
            del x, y
            whole = [sum(p[i] for p in parts) for i in range(4)]
            w = ridge_solve(*whole[:3], self._ridge(whole, parts) if folds > 1 else self.RIDGE)
            self._set_value_head(w[:-1], w[-1:])

    RIDGES = ()   # ridges to choose among by cross-validation over the batch's trajectories (_ridge); none: RIDGE
    FOLDS = 4

    def _ridge(self, whole, parts):
        """The ridge among RIDGES whose heads, each fitted without one of the
        FOLDS groups of the batch's trajectories (parts: each group's gram),
        best predict the group left out (squared error summed over the
        folds). Used only with RIDGES and at least FOLDS trajectories."""
        err = []
        for r in self.RIDGES:
            e = 0.0
            for xtx, xty, n, yty in parts:
                w = ridge_solve(whole[0] - xtx, whole[1] - xty, whole[2] - n, r)
                e += float(w @ xtx @ w - 2 * w @ xty + yty)   # |x w - y|^2 on the group left out
            err.append(e)
        return self.RIDGES[min(range(len(err)), key=err.__getitem__)]

    def _value_features(self, inputs, mask):
        """What the critic's linear value head reads at each position (B, T,
        width), or None for a critic without one to solve."""
        feats = getattr(self.critic, "value_features", None)
        return None if feats is None else feats(inputs)

    def _value_head(self):
        return self.critic.head

    def _set_value_head(self, weight, bias):
        head = self._value_head()
        head.weight.copy_(weight.view_as(head.weight).to(head.weight.dtype))
        head.bias.copy_(bias.to(head.bias.dtype))

    def logprob_gaps(self, p):
        """The train-inference gap on a padded batch: |trainer - sampler| log-prob
        of each loss token with R3 replay and with the trainer's own routing, and
        which loss tokens the trainer would route differently at some layer."""
        with torch.no_grad():
            replayed, _ = self._logp(p.inputs, p.targets, p.routing, p.temperature)
            self._beat()
            free, _ = self._logp(p.inputs, p.targets, None, p.temperature)
            self._beat()
            _, own = self.actor(p.inputs)
            self._beat()
        flips = (own.sort(-1).values != p.routing.sort(-1).values).any(-1).any(-1)
        return {"replayed": replayed, "gap_replay": (replayed - p.sampler_logp)[p.mask].abs(),
                "gap_free": (free - p.sampler_logp)[p.mask].abs(), "flips": flips[p.mask]}

    def _is_weights(self, trajs, p, old_logp, h):
        """The off-policy correction's per-token weights (ppo.is_weights) from
        the sampler's log-probs, which every trajectory must then hold."""
        if h.is_correction != "none":
            try:
                B.require_sampler_logprobs(trajs, f"ppo.is_correction = {h.is_correction!r}")
            except ValueError as e:
                raise httpjson.HTTPError(400, str(e))
        return ppo.is_weights(old_logp, p.sampler_logp, p.mask, h.is_correction, h.is_cap)

    def ppo_step(self, req):
        h = self._hyper(req)
        meta, trajs = self._load_batch(req, need_routing=True)
        self._set_lr(self.actor_opt, h.actor_lr)
        self._set_lr(self.critic_opt, h.critic_lr)
        p = B.pad(trajs, self.device)
        inputs, targets, mask, routing, temp = p.inputs, p.targets, p.mask, p.routing, p.temperature
        # The old log-probs: this policy, before the update, on the sampler's
        # experts (R3), computed once so every later minibatch's ratio measures
        # how far the update has moved.
        gaps = self.logprob_gaps(p)
        old_logp = gaps["replayed"]
        is_w, is_stats = self._is_weights(trajs, p, old_logp, h)
        values, clipped = self._baseline(inputs, mask)
        self._beat()
        adv, ret = self._advantages(trajs, values, mask, h)
        ev = ppo.explained_variance(values[mask], ret[mask])
        ceiling = ppo.prefix_ceiling_ev(inputs, mask, ret, torch.ones(len(trajs), dtype=torch.bool))
        total = h.update_epochs * len(self._minibatches(len(trajs), h.minibatches, h.max_minibatch))
        start = [q.detach().clone() for q in self._actor_weights()] if h.min_pos_ratio > 0 else None
        step, actor_updates, kl_stop = 0, 0, None
        stats = {"policy_loss": [], "value_loss": [], "entropy": [], "approx_kl": [], "clipfrac": []}
        self.actor.train()
        self.critic.train()
        for _ in range(h.update_epochs):
            for mb in self._minibatches(len(trajs), h.minibatches, h.max_minibatch):
                m = mask[mb]
                if kl_stop is None:
                    if self._actor_update(h, mb, m, inputs, targets, routing, temp, old_logp, adv, is_w, stats):
                        actor_updates += 1
                    else:
                        kl_stop = step + 1
                v = self._values(inputs[mb], mask=mask[mb])
                vl = ppo.value_loss(v[m], ret[mb][m])
                self.critic_opt.zero_grad()
                (h.vf_coef * vl).backward()
                torch.nn.utils.clip_grad_norm_(self.critic.parameters(), h.max_grad_norm)
                self.critic_opt.step()
                stats["value_loss"].append(float(vl))
                step += 1
                tick = {"value_loss": float(vl)}
                if kl_stop is None:   # the actor trained on this minibatch
                    tick["policy_loss"] = stats["policy_loss"][-1]
                self._tick(step, total, **tick)
        post = self._after_update(p, old_logp, adv, h, start)
        self._solve_value_head(inputs, mask, ret)   # for the next step's batch: the returns this one saw
        self._fitted_on(ret[mask])
        out = {k: sum(v) / len(v) for k, v in stats.items()}
        out.update(is_stats)
        out.update(post)
        out.update({
            "actor_updates": actor_updates, "kl_stop_minibatch": kl_stop or 0,
            "explained_variance": ev, "ceiling_ev": ceiling, "value_clipped": clipped, "value_range": self._range_out(),
            "advantage_mean": float(adv[mask].double().mean()),
            "logprob_gap_replay": float(gaps["gap_replay"].mean()), "logprob_gap_noreplay": float(gaps["gap_free"].mean()),
            "logprob_gap_replay_max": float(gaps["gap_replay"].max()),
            "reward_mean": sum(t.reward for t in trajs) / len(trajs), "trajectories": len(trajs),
            "tokens": int(mask.sum()),
            "policy_versions": sorted({str(e.get("policy_version", "")) for e in meta["trajectories"]}),
        })
        return out

    def _after_update(self, p, old_logp, adv, h, start):
        """The step's update measured on its whole batch: post_kl (k3,
        KL(before || after) over the loss tokens), pos_ratio_min (the lowest
        after/before probability ratio of a token with a positive advantage)
        and pos_ratio_low_share (the share of those under 1 - clip_coef).
        With h.min_pos_ratio (start: the actor's weights before the step), an
        update under which pos_ratio_min < min_pos_ratio is halved toward
        start until it is not, at most h.backtracks times, then undone:
        actor_backtracks, actor_step_share (1: the update as trained)."""
        pos = (adv > 0) & p.mask

        def measure():
            with torch.no_grad():
                new, _ = self._logp(p.inputs, p.targets, p.routing, p.temperature)
            self._beat()
            lr = (new - old_logp)[p.mask].double()
            ratio = (new - old_logp)[pos].double().exp()
            return {"post_kl": float((lr.exp() - 1 - lr).mean()) if lr.numel() else 0.0,
                    "pos_ratio_min": float(ratio.min()) if ratio.numel() else 1.0,
                    "pos_ratio_low_share": float((ratio < 1 - h.clip_coef).double().mean()) if ratio.numel() else 0.0}

        m, backtracks, share = measure(), 0, 1.0
        if start is not None and m["pos_ratio_min"] < h.min_pos_ratio:
            end = [q.detach().clone() for q in self._actor_weights()]
            while m["pos_ratio_min"] < h.min_pos_ratio and share > 0:
                backtracks += 1
                share = share / 2 if backtracks <= h.backtracks else 0.0
                with torch.no_grad():
                    for q, a, b in zip(self._actor_weights(), start, end):
                        q.copy_(a + share * (b - a))
                m = measure()
        m.update(actor_backtracks=backtracks, actor_step_share=share)
        return m

    def _actor_weights(self):
        """The actor's parameters as its optimizer holds them (the sharded
        trainer reshards first)."""
        return list(self.actor.parameters())

    def _actor_update(self, h, mb, m, inputs, targets, routing, temp, old_logp, adv, is_w, stats):
        """One minibatch's clipped-surrogate update of the actor. With
        h.target_kl set, a minibatch whose approx_kl (this policy against the
        step's starting one, before this update) exceeds it is not trained
        on and the actor stops for this step: False. The stats record the
        minibatch either way."""
        a = adv[mb][m]
        if h.norm_adv and a.numel() > 1:
            a = (a - a.mean()) / (a.std() + 1e-8)
        new_logp, ent = self._logp(inputs[mb], targets[mb], None if routing is None else routing[mb], temp[mb])
        pg, s = ppo.policy_loss(new_logp[m], old_logp[mb][m], a, h.clip_coef, None if is_w is None else is_w[mb][m])
        entropy = ent[m].mean()
        for k, val in (("policy_loss", float(pg)), ("entropy", float(entropy)),
                       ("approx_kl", s["approx_kl"]), ("clipfrac", s["clipfrac"])):
            stats[k].append(val)
        if h.target_kl > 0 and s["approx_kl"] > h.target_kl:
            return False
        self.actor_opt.zero_grad()
        (pg - h.ent_coef * entropy).backward()
        torch.nn.utils.clip_grad_norm_(self.actor.parameters(), h.max_grad_norm)
        self.actor_opt.step()
        self._beat()
        return True

    # ---- checkpoints -------------------------------------------------------
    def _with_dir(self, req, fn):
        d = req.get("dir")
        if not d:
            raise httpjson.HTTPError(400, "dir is required")
        with self.lock:
            return fn(d)

    def save(self, req):
        return self._with_dir(req, self._save)

    def _save(self, d):
        tmp = d.rstrip("/") + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        M.save_checkpoint(self.actor, tmp, "model", {"version": f"v{self.version}"})
        M.save_checkpoint(self.critic, tmp, "critic")
        files = []
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as f:
                b = f.read()
            files.append({"name": name, "sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)})
        manifest = {"version": self.version, "weight_version": f"v{self.version}", "files": files,
                    "config": json.load(open(os.path.join(tmp, "model.json")))}
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)
        shutil.rmtree(d, ignore_errors=True)
        os.replace(tmp, d)
        return manifest

    def load(self, req):
        return self._with_dir(req, self._load)

    def _load(self, d):
        actor, meta = M.load_checkpoint(d, "model", self.device)
        self.actor = actor
        self.critic = self._critic_from(d)
        v = str(meta.get("version", "v0")).lstrip("v")
        self.version = int(v) if v.isdigit() else 0
        self._new_optimizers()
        self._commit_state()
        self.log(f"load {d} version={self.version}")
        return {"version": self.version, "weight_version": f"v{self.version}"}

    def init(self, req):
        """Fresh random weights from a seed (a campaign's configured init):
        version 0, committed like a load, so a restart keeps them."""
        seed = req.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise httpjson.HTTPError(400, f"seed = {seed!r} must be an integer >= 0")
        with self.lock:
            self._init("random", seed)
            self.log(f"init random seed={seed} version={self.version}")
            return {"version": self.version, "weight_version": f"v{self.version}"}

    def _routing_dims(self):
        c = self.actor.cfg
        return c.n_layer, c.n_experts, c.top_k

    def score(self, req):
        """POST /score {"tokens", "routing"?, "temperature"?}: the policy's
        log-prob of tokens[1:] (each given the tokens before it) at the
        temperature, replaying routing ([T-1][MoE layers][top_k]: the engine's
        rows for the same tokens) when given. The Go side compares an engine's
        log-probs on a fixed probe with these after every weight reload."""
        tokens = req.get("tokens")
        if not isinstance(tokens, list) or len(tokens) < 2 or not all(isinstance(t, int) for t in tokens):
            raise httpjson.HTTPError(400, "tokens must be a list of at least 2 token IDs")
        try:
            temperature = float(req.get("temperature", 1.0))
        except (TypeError, ValueError):
            temperature = -1.0
        if not temperature > 0:
            raise httpjson.HTTPError(400, f"temperature = {req.get('temperature')!r} must be a number > 0")
        vocab = getattr(getattr(self.actor, "cfg", None), "vocab_size", None) or self.actor.config.vocab_size
        if min(tokens) < 0 or max(tokens) >= vocab:
            raise httpjson.HTTPError(400, f"tokens holds an ID outside [0, {vocab})")
        n_layers, n_experts, top_k = self._routing_dims()
        routing = None
        if req.get("routing") is not None:
            r = torch.tensor(req["routing"], dtype=torch.long)
            if tuple(r.shape) != (len(tokens) - 1, n_layers, top_k):
                raise httpjson.HTTPError(400, f"routing has shape {list(r.shape)}, expected [{len(tokens) - 1}, {n_layers}, {top_k}] (T-1 rows)")
            if r.min() < 0 or r.max() >= n_experts:
                raise httpjson.HTTPError(400, f"routing holds expert IDs outside [0, {n_experts})")
            routing = r.unsqueeze(0).to(self.device)
        inputs = torch.tensor([tokens[:-1]], device=self.device)
        targets = torch.tensor([tokens[1:]], device=self.device)
        with self.lock, torch.no_grad():
            was = self.actor.training
            self.actor.eval()
            logp, _ = self._logp(inputs, targets, routing, torch.tensor([[[temperature]]], device=self.device))
            self.actor.train(was)
        return {"logprobs": [float(x) for x in logp[0]], "version": self.version, "weight_version": f"v{self.version}"}

    def health(self, _):
        return {"ok": True, "version": self.version, "device": self.device, "busy": self.lock.locked(),
                "pid": os.getpid(), "cuda": torch.cuda.is_available()}

    def cancel(self, req):
        self.cancel_key = req.get("key")
        return {"ok": True}


def gram(x, y):
    """What ridge_solve needs of rows x (N, W) and targets y (N,): x'x, x'y,
    N, and y'y (the squared error of a w on these rows is w'x'xw - 2w'x'y + y'y)."""
    return x.T @ x, x.T @ y, x.shape[0], y @ y


def ridge_solve(xtx, xty, n, ridge):
    """The least-squares w of x w = y from gram(x, y), ridge per row on every
    weight but the last (the bias, x's column of ones)."""
    reg = ridge * n * torch.eye(xtx.shape[0], dtype=xtx.dtype, device=xtx.device)
    reg[-1, -1] = 0   # the bias is not shrunk
    return torch.linalg.solve(xtx + reg, xty)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--workdir", required=True, help="state, idempotency records and ops.log live here")
    ap.add_argument("--init", default="random", help="checkpoint directory, or 'random'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=0, help="context length of a random init (0: the default config), as the inference server's")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--slow-ms", type=int, default=0, help="sleep after each minibatch and before answering a committed operation (tests widen crash windows)")
    ap.add_argument("--hang-once", default="", help="tests: while this file exists, hang after the second minibatch of an operation (and remove it)")
    ap.add_argument("--port-file", help="write the bound port here once listening")
    ap.add_argument("--crash-at", choices=commit.CRASH_POINTS + commit.PROGRESS_CRASH_POINTS,
                    help="TESTS ONLY: kill this process (SIGKILL) at this step of a training operation's commit, or after SFT or a critic fit saved its first epoch (sft-epoch, critic_fit-epoch)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tr = Trainer(args)
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
    srv = httpjson.serve(args.host, args.port, routes, "t1flow reference trainer")
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(srv.server_address[1]))
        os.replace(tmp, args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
