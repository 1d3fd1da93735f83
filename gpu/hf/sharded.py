"""The hf trainer as N ranks under torchrun (gpu/hf/README.md, "Scaling"):
trainer.py, started by `torchrun --nproc-per-node N`, runs this.

- Rank 0 serves the protocol over HTTP (trainer.py's routes, unchanged) and
  runs the idempotency logic (gpu/reference/trainer.py's _run, commit.py's
  Store) alone; it hands every operation that touches the models to all
  ranks over a CPU (gloo) control group, and all ranks run it together.
- Every rank trains: the policy and the critic are sharded with FSDP2
  (parallelize.py); each minibatch's trajectories are split into contiguous
  data-parallel slices, one per rank, each with its own R3 routing rows; the
  per-token log-probs, entropies and values are gathered across ranks, so the
  losses, metrics and minibatch order are the one-rank trainer's code on the
  whole minibatch (the gather's backward hands each rank its slice's
  gradient; FSDP averages over ranks, the gather sums, the two cancel).
- Exactly once: rank 0's Store makes state.new/; every rank writes its shards
  of the models and Adam states into state.new/dcp/ (torch.distributed.checkpoint,
  whose coordinator writes the metadata after all ranks' writes); after a
  barrier rank 0 adds the record (op.json) and commits by renaming, as the
  one-rank trainer does. A rank killed at any point ends the whole group
  (torchrun's agent stops the others); the supervisor restarts it, rank 0
  rolls back or forward from what is on disk, every rank loads state/dcp/.
- /save writes a Hugging Face checkpoint without any rank holding the whole
  model: each tensor is gathered in turn and kept by one rank, which writes
  the tensors it kept to its own model-0000R-of-0000N.safetensors
  (model.safetensors.index.json maps them); critic-0000R-of-0000N.safetensors the same.
- Each training operation seeds torch's global generator from its key
  (op_seed), so its minibatch order is the same on every rank and after a
  restart.

The workdir (and batch directories) must be on a file system every rank
sees: each rank writes its own shards there and reads the batch itself.
"""
import contextlib
import datetime
import hashlib
import json
import os
import signal
import sys
import threading
import traceback

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

import commit  # gpu/reference
import epochs  # gpu/reference
import hfmoe
import httpjson  # gpu/reference
import parallelize as P
import trainer as T

DCP_DIR = "dcp"
TRAINING_OPS = ("sft", "critic_fit", "ppo_step")


def launched():
    """Started by torchrun (its environment names this process's rank)."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def op_seed(key):
    """The global generator's seed for a training operation (every rank the same)."""
    return int(hashlib.sha256(("t1flow/op/" + key).encode()).hexdigest()[:15], 16)


class Group:
    """The process group (NCCL on CUDA, gloo on CPU), its 1-D device mesh, and
    a gloo control group that carries rank 0's operations to the others (it
    waits as long as the trainer idles)."""

    def __init__(self, device):
        self.cuda = str(device).startswith("cuda")
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if self.cuda:
            torch.cuda.set_device(self.local_rank)
        dist.init_process_group("nccl" if self.cuda else "gloo", timeout=datetime.timedelta(minutes=30))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.control = dist.new_group(backend="gloo", timeout=datetime.timedelta(days=365))
        self.mesh = init_device_mesh("cuda" if self.cuda else "cpu", (self.size,))
        self.device = f"cuda:{self.local_rank}" if self.cuda else "cpu"

    def send(self, msg):
        dist.broadcast_object_list([msg], src=0, group=self.control)

    def recv(self):
        box = [None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def agree(self, value):
        """Every rank's value (a small picklable object), in rank order."""
        out = [None] * self.size
        dist.all_gather_object(out, value, group=self.control)
        return out

    def barrier(self):
        dist.barrier(group=self.control)


# ---- data parallelism ---------------------------------------------------------
def rows_of(n, rank, size):
    """This rank's rows of an n-row minibatch: a contiguous slice of
    ceil(n / size) rows, padded with repeats of the last row (their outputs
    are dropped) so every rank runs the same shapes."""
    per = -(-n // size)
    idx = list(range(rank * per, min(n, (rank + 1) * per)))
    return idx + [n - 1] * (per - len(idx))


class _Gather(torch.autograd.Function):
    """Every rank's rows, concatenated in rank order and cut to n. Backward:
    the gradient of this rank's rows, summed over ranks (every rank computes
    the same loss from the gathered rows; FSDP then averages over ranks)."""

    @staticmethod
    def forward(ctx, x, n, rank, size):
        ctx.n, ctx.rank, ctx.per = n, rank, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)[:n]

    @staticmethod
    def backward(ctx, g):
        size = dist.get_world_size()
        full = g.new_zeros((ctx.per * size,) + tuple(g.shape[1:]))
        full[:ctx.n] = g
        dist.all_reduce(full)
        return full[ctx.rank * ctx.per:(ctx.rank + 1) * ctx.per], None, None, None


def gather_rows(x, n):
    return _Gather.apply(x, n, dist.get_rank(), dist.get_world_size())


# ---- checkpoints ----------------------------------------------------------------
class Weights(Stateful):
    """A model and its optimiser's state, as DCP saves and loads them: the
    model's (sharded) state dict, and the optimiser's per-parameter tensors
    under optim.<index>.<name> -- only those it has (an expert that never
    had a gradient has none, and must have none after a resume). To load,
    layout (saved_layout) says which there are; the hyperparameters
    (param_groups) are the fresh optimiser's (each operation sets its rates)."""

    def __init__(self, model, opt, layout=None, absent=()):
        self.model, self.opt, self.layout = model, opt, layout
        self.absent = absent   # loading: the model's optional keys the checkpoint lacks (optional_absent)

    def state_dict(self):
        if self.layout is None:   # saving: what the optimiser has
            optim = {str(i): dict(st) for i, st in self.opt.state_dict()["state"].items()}
        else:   # loading: tensors of the right shapes and shardings to load into
            params = [p for g in self.opt.param_groups for p in g["params"]]
            optim = {i: {k: torch.zeros(()) if k == "step" else torch.zeros_like(params[int(i)]) for k in keys}
                     for i, keys in self.layout.items()}
        model = self.model.state_dict()
        for k in self.absent:
            model.pop(k)
        return {"model": model, "optim": optim}

    def load_state_dict(self, sd):
        missing, unexpected = self.model.load_state_dict(sd["model"], strict=False)
        if set(missing) != set(self.absent) or unexpected:
            raise ValueError(f"DCP state: the model's keys missing {sorted(set(missing) - set(self.absent))}, "
                             f"unexpected {unexpected}")
        osd = self.opt.state_dict()
        osd["state"] = {int(i): st for i, st in sd["optim"].items()}
        self.opt.load_state_dict(osd)


def optional_absent(path, name, model):
    """The optional keys of model's state (a critic's value range, newer
    than some states) that the DCP checkpoint at path lacks: they keep the
    fresh model's values (an empty range: not fitted yet)."""
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    return tuple(k for k in T.M.OPTIONAL_KEYS if hasattr(model, k) and f"{name}.model.{k}" not in saved)


def saved_layout(path, name):
    """{parameter index: [state names]} of name's optimiser in the DCP checkpoint at path."""
    prefix, out = f"{name}.optim.", {}
    for k in dcp.FileSystemReader(path).read_metadata().state_dict_metadata:
        if k.startswith(prefix):
            i, key = k[len(prefix):].split(".", 1)
            out.setdefault(i, []).append(key)
    return out


def full_tensors(model, group, keep):
    """Each entry of model's state dict as a full CPU tensor, gathered in turn
    (a collective: every rank, the same order); returns those keep(name) says
    this rank keeps, so no rank holds more than its share plus one tensor."""
    mine = {}
    for name, v in model.state_dict().items():
        if isinstance(v, DTensor):
            local = v.to_local()
            if group.cuda and local.device.type != "cuda":   # CPU offload: gather over NCCL from the device
                v = DTensor.from_local(local.to(group.device), v.device_mesh, v.placements, shape=v.shape, stride=v.stride())
            v = v.full_tensor()
        if keep(name):
            mine[name] = v.detach().to("cpu").contiguous().clone()
        del v
    return mine


def export(model, d, prefix, group, skip=()):
    """model's full tensors as safetensors files under d, one per rank
    (prefix-0000R-of-0000N.safetensors, or prefix.safetensors on one rank),
    tensors dealt out by size; returns {name: file} (rank 0 writes the index)."""
    from safetensors.torch import save_file

    names = [(k, v.numel()) for k, v in model.state_dict().items() if k not in skip]
    owner, load = {}, [0] * group.size
    for k, n in sorted(names, key=lambda kv: -kv[1]):
        r = min(range(group.size), key=lambda i: load[i])
        owner[k], load[r] = r, load[r] + n
    files = [f"{prefix}.safetensors"] if group.size == 1 else \
        [f"{prefix}-{r + 1:05d}-of-{group.size:05d}.safetensors" for r in range(group.size)]
    mine = full_tensors(model, group, lambda k: owner.get(k) == group.rank)
    save_file(mine, os.path.join(d, files[group.rank]), metadata={"format": "pt"})
    group.barrier()
    return {k: files[r] for k, r in owner.items()}


def read_shards(d, prefix):
    """Every tensor of d's prefix-*.safetensors (or None when there are none)."""
    from safetensors.torch import load_file

    files = sorted(n for n in os.listdir(d) if n.startswith(prefix + "-") and n.endswith(".safetensors"))
    if not files:
        return None
    out = {}
    for n in files:
        out.update(load_file(os.path.join(d, n)))
    return out


class RankStore:
    """What ranks other than 0 have of commit.Store: they never commit or
    record (rank 0 does); they only read whether there is state, log to
    their stderr, and die at a crash point (tests)."""

    def __init__(self, workdir, rank, crash_at):
        self.workdir, self.rank, self.crash_at = workdir, rank, crash_at
        self.state_dir = os.path.join(workdir, "state")

    def has_state(self):
        return os.path.exists(os.path.join(self.state_dir, "state.json"))

    def log(self, line):
        print(f"trainer rank {self.rank}: {line}", file=sys.stderr, flush=True)

    def crash(self, point):
        if self.crash_at == point:
            self.log(f"--crash-at {point}: killing myself")
            os.kill(os.getpid(), signal.SIGKILL)


class ShardedProgress(epochs.Progress):
    """epochs.Progress with each epoch's model and optimiser in DCP (every
    rank its shards) and the minibatch generator beside it; epoch.json is
    still the commit point, written by rank 0 after every shard."""

    def __init__(self, workdir, req, version, group):
        super().__init__(workdir, req, version)
        self.g = group

    def load(self, model, opt, gen):
        try:
            with open(os.path.join(self.dir, "epoch.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = None
        ok = meta is not None and (meta.get("key"), meta.get("fingerprint"), meta.get("version")) == (self.key, self.fp, self.version)
        self.g.barrier()   # every rank has read epoch.json before rank 0 may remove it
        if not ok:
            if meta is not None and self.g.rank == 0:
                import shutil
                shutil.rmtree(self.dir, ignore_errors=True)
            return None
        path = os.path.join(self.dir, meta["file"])
        dcp.load({"w": Weights(model, opt, saved_layout(path, "w"), optional_absent(path, "w", model))}, checkpoint_id=path)
        gen.set_state(torch.load(os.path.join(self.dir, meta["file"] + ".gen.pt")))
        return meta["counters"]

    def save(self, model, opt, gen, counters):
        import shutil

        name = f"epoch-{counters['epoch']}"
        if self.g.rank == 0:
            os.makedirs(self.dir, exist_ok=True)
            shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
        self.g.barrier()
        dcp.save({"w": Weights(model, opt)}, checkpoint_id=os.path.join(self.dir, name))
        self.g.barrier()
        if self.g.rank == 0:
            torch.save(gen.get_state(), os.path.join(self.dir, name + ".gen.pt"))
            commit.write_json(os.path.join(self.dir, "epoch.json"), {
                "key": self.key, "fingerprint": self.fp, "version": self.version, "file": name, "counters": counters})
            commit.fsync_dir(self.dir)
            for old in os.listdir(self.dir):
                if old.startswith("epoch-") and old not in (name, name + ".gen.pt"):
                    p = os.path.join(self.dir, old)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        self.g.barrier()


# ---- the trainer ------------------------------------------------------------------
class ShardedTrainer(T.Trainer):
    """trainer.Trainer on every rank of a torchrun group (the module doc)."""

    def __init__(self, args, group):
        self.g, self.rank, self._depth = group, group.rank, 0
        args.device = group.device
        self.cpu_offload = bool(getattr(args, "cpu_offload", False))
        if getattr(args, "crash_rank", 0) != group.rank:
            args.crash_at = None   # tests: --crash-at applies on --crash-rank only
        if self.rank == 0:
            super().__init__(args)   # the Store; _load_state or _init, handed to every rank
            return
        args.hang_once = ""   # rank 0's hang (tests) stops the group at the next collective
        self._options(args)
        self.args, self.device, self.workdir = args, args.device, os.path.abspath(args.workdir)
        self.lock = threading.Lock()
        self.progress = {"op": None, "key": None, "done": 0, "total": 0, "metrics": {}}
        self.cancel_key = None
        self.store = RankStore(self.workdir, self.rank, args.crash_at)
        self.state_dir = self.store.state_dir
        self.version = 0

    # ---- handing operations to every rank ----------------------------------------
    @contextlib.contextmanager
    def _together(self, name, *args):
        """Run the block on every rank: rank 0, outside any other such block,
        hands (name, args) to the others first. Afterwards the ranks compare
        outcomes: one that failed where another did not leaves the group
        inconsistent, so the process exits and the supervisor restarts the
        group from the last commit."""
        top = self.rank == 0 and self._depth == 0
        if top:
            self.g.send((name, args))
        self._depth += 1
        err = None
        try:
            yield
        except BaseException as e:
            err = e
            raise
        finally:
            self._depth -= 1
            if top:
                self._settle(err)

    def _settle(self, err):
        outcomes = self.g.agree(None if err is None else type(err).__name__)
        if len(set(outcomes)) > 1:
            self.log(f"ranks disagree on the outcome of an operation ({outcomes}): exiting for a restart of the group")
            os._exit(1)

    def serve_ranks(self):
        """Ranks other than 0: run what rank 0 hands over, until the group ends."""
        while True:
            name, args = self.g.recv()
            self._depth = 1
            err = None
            try:
                getattr(self, name)(*args)
                if name in TRAINING_OPS:
                    self.store.crash("trained")
            except (httpjson.HTTPError, ValueError, OSError) as e:   # the request's fault (a bad batch or directory): rank 0 failed alike
                err = e
                self.log(f"{name}: {e}\n{traceback.format_exc()}")
            finally:
                self._depth = 0
            self._settle(err)

    # ---- operations ----------------------------------------------------------
    def _train(self, name, req, fn):
        with self._together(name, req):
            torch.manual_seed(op_seed(str(req.get("key"))))
            return fn(req)

    def sft(self, req):
        return self._train("sft", req, super().sft)

    def critic_fit(self, req):
        return self._train("critic_fit", req, super().critic_fit)

    def ppo_step(self, req):
        return self._train("ppo_step", req, super().ppo_step)

    def score(self, req):
        """/score (the reload probe) runs the gathered forward: every rank takes part."""
        with self._together("score", req):
            return super().score(req)

    def _init(self, init, seed):
        with self._together("_init", init, seed):
            super()._init(init, seed)

    def _load(self, d):
        with self._together("_load", d):
            return super()._load(d)

    def _tick(self, done, total, **metrics):
        """The reference's tick; a cancel seen by rank 0 stops every rank at the same minibatch."""
        try:
            super()._tick(done, total, **metrics)
            stop = None
        except reference_cancelled() as e:
            stop = e
        if self.g.agree(None if stop is None else str(stop))[0] is not None and stop is None:
            stop = reference_cancelled()(f"{self.progress['op']} {self.progress['key']} cancelled")
        if stop is not None:
            raise stop

    def _progress(self, req):
        return ShardedProgress(self.workdir, req, self.version, self.g)

    # ---- models --------------------------------------------------------------
    def _prepare(self, model):
        return model   # parallelize() does checkpointing and placement, once the critic is copied

    def _place(self, model):
        return model

    def _new_optimizers(self):
        for m in (self.actor, self.critic):
            if not getattr(m, "_t1_sharded", False):
                P.parallelize(m, self.g.mesh, bf16=self.amp, grad_ckpt=self.grad_ckpt, cpu_offload=self.cpu_offload)
                m._t1_sharded = True
        super()._new_optimizers()   # the actor's through _fresh_actor_optimizer, its experts skipped there
        P.skip_unused_experts(self.critic_opt, self.critic)

    def _critic_from(self, ckpt):
        shards = read_shards(ckpt, "critic") if ckpt else None
        if shards is None:
            return super()._critic_from(ckpt)
        return self._critic_with(shards, os.path.join(ckpt, "critic-*.safetensors"))

    def _critic_from_policy(self):
        """As on one rank: the critic restarts from the SFT policy's body with
        a fresh value head and optimiser. FSDP2 cannot deep-copy the sharded
        policy, so its full state is gathered (a collective: every rank) into
        an unsharded model of the same architecture, the critic is built on
        that, and then sharded like the first."""
        import transformers
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.actor, options=StateDictOptions(full_state_dict=True))
        with torch.random.fork_rng(devices=[]):   # the global RNG (minibatch order) is left alone
            body = transformers.AutoModelForCausalLM.from_config(self.actor.config)
        body.load_state_dict({k: v.detach().to("cpu") for k, v in full.items()})
        hfmoe.install_routing(body)
        sharded, self.actor = self.actor, body
        try:
            critic = self._critic_from(None)
        finally:
            self.actor = sharded
        del body, full
        P.parallelize(critic, self.g.mesh, bf16=self.amp, grad_ckpt=self.grad_ckpt, cpu_offload=self.cpu_offload)
        critic._t1_sharded = True
        self.critic = critic
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1.5e-5)
        P.skip_unused_experts(self.critic_opt, self.critic)

    def _fresh_actor_optimizer(self):
        super()._fresh_actor_optimizer()
        P.skip_unused_experts(self.actor_opt, self.actor)

    def _actor_weights(self):
        """The sharded parameters: FSDP2 keeps a unit's gathered (unsharded)
        parameters registered on it after a forward without backward (the
        root's, here), and those are what parameters() then returns; a write
        to them would be lost at the next gather. reshard() (not recursive)
        puts every unit's sharded parameters back."""
        for m in self.actor.modules():
            if hasattr(m, "reshard"):
                m.reshard()
        return list(self.actor.parameters())

    def _logp(self, inputs, targets, routing, temperature=None):
        """This rank's rows through the policy (with their own routing rows);
        every rank's log-probs, entropies and captured routing, gathered."""
        n = inputs.shape[0]
        rows = torch.tensor(rows_of(n, self.rank, self.g.size), device=inputs.device)
        ctl = self.actor.t1_routing
        seen = None if ctl.capture is None else len(ctl.capture)
        pick = (lambda x: None if x is None else x[rows.to(x.device)])
        logp, ent = super()._logp(inputs[rows], targets[rows], pick(routing), pick(temperature))
        if seen is not None:
            ctl.capture[seen:] = [gather_rows(c, n) for c in ctl.capture[seen:]]
        return gather_rows(logp, n), gather_rows(ent, n)

    def _values(self, inputs, routing=None, mask=None):
        n = inputs.shape[0]
        rows = torch.tensor(rows_of(n, self.rank, self.g.size), device=inputs.device)
        return gather_rows(super()._values(inputs[rows], mask=None if mask is None else mask[rows]), n)

    def _value_features(self, inputs, mask):
        """The value head's features of every rank's rows, gathered: every
        rank then solves the same head (the reference's _solve_value_head)."""
        n = inputs.shape[0]
        rows = torch.tensor(rows_of(n, self.rank, self.g.size), device=inputs.device)
        return gather_rows(super()._value_features(inputs[rows], mask[rows]), n)

    def _set_value_head(self, weight, bias):
        """The solved head into the sharded value head: each rank keeps its
        shard of the full weight and bias (rank 0's, scattered)."""
        from torch.distributed.tensor import distribute_tensor

        if hasattr(self.critic, "reshard"):   # FSDP2's root stays unsharded after the features' forward: its
            self.critic.reshard()             # parameters are then full copies, which a reshard drops
        head = self.critic.value_head
        for p, full in ((head.weight, weight.view(head.weight.shape)), (head.bias, bias.view(head.bias.shape))):
            if not isinstance(p, DTensor):   # replicated (torch 2.5 on CPU)
                p.copy_(full.to(p.dtype))
                continue
            local = p.to_local()
            dev = self.g.device if self.g.cuda else "cpu"
            mine = distribute_tensor(full.to(device=dev, dtype=p.dtype), p.device_mesh, p.placements).to_local()
            local.copy_(mine.to(local.device))

    # ---- state ---------------------------------------------------------------
    def _stateful(self, path=None):
        """What DCP saves (path None) or loads from path: both models with their optimisers."""
        return {name: Weights(m, o, None if path is None else saved_layout(path, name),
                              () if path is None else optional_absent(path, name, m))
                for name, m, o in (("actor", self.actor, self.actor_opt), ("critic", self.critic, self.critic_opt))}

    def _commit_state(self, rec=None):
        if self.rank == 0:
            return super()._commit_state(rec)   # Store.commit: state.new/, _write_state, the renames
        self._write_state(self.state_dir + ".new")   # within _init / _load: this rank's shards

    def _write_state(self, d, crash=None, training=None, version=None):
        """Every rank's shards of both models and their Adam states into
        d/dcp/ (d is state.new/, which rank 0's Store made); rank 0 adds the
        rest. training: this is a training operation's commit (crash points)."""
        if self.rank == 0:
            training = crash is not None and crash == self.store.crash
        elif version is not None:
            self.version = version
        with self._together("_write_state", d, None, training, self.version):
            self.g.barrier()   # rank 0 has made d
            dcp.save(self._stateful(), checkpoint_id=os.path.join(d, DCP_DIR))
            if training:
                (crash if self.rank == 0 else self.store.crash)("staged-weights")
            self.g.barrier()   # every rank's shards are staged
            if self.rank == 0:
                commit.fsync_dir(os.path.join(d, DCP_DIR))
                self.actor.config.save_pretrained(d)
                if self.tok is not None:
                    self.tok.save_pretrained(d)
                with open(os.path.join(d, T.VERSION_FILE), "w") as f:
                    json.dump({"version": self.version, "weight_version": f"v{self.version}", "backend": "hf",
                               "sharded": self.g.size}, f)
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"version": self.version, "sharded": True, "world_size": self.g.size}, f)

    def _load_state(self):
        with self._together("_load_state"):
            with open(os.path.join(self.state_dir, "state.json")) as f:
                st = json.load(f)
            if not st.get("sharded"):
                raise ValueError(f"{self.state_dir}: not a sharded trainer's state (no DCP checkpoint); "
                                 "start the one-rank trainer on it, /save, and /load that checkpoint")
            self.actor = self._random_actor(0)   # the architecture; DCP fills the weights
            self._tokenizer_from(self.state_dir)
            path = os.path.join(self.state_dir, DCP_DIR)
            saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
            head = saved.get("critic.model.value_head.weight")
            pool = None if head is None else \
                T.pooled_head(head.size[-1], self.actor.get_decoder().config.hidden_size, path)   # a state from before the mean: h_t alone
            op = "max" if head is None or "critic.model." + T.POOL_MAX_MARK in saved else "mean"
            self.critic = self._critic_with(None, None, pool=pool, op=op)
            self._new_optimizers()
            dcp.load(self._stateful(path), checkpoint_id=path)
            self.version = st["version"]

    def _write_checkpoint(self, d, crash=lambda _: None):
        """/save: the policy as a Hugging Face checkpoint, tensor by tensor
        (export), the critic beside it, the tokenizer and weight version."""
        with self._together("_write_checkpoint", d):
            tied = getattr(self.actor.config, "tie_word_embeddings", False)
            where = export(self.actor, d, "model", self.g, skip=("lm_head.weight",) if tied else ())
            export(self.critic, d, "critic", self.g)
            if self.rank == 0:
                if self.g.size > 1:
                    commit.write_json(os.path.join(d, "model.safetensors.index.json"),
                                      {"metadata": {"format": "pt"}, "weight_map": where})
                self.actor.config.save_pretrained(d)
                if getattr(self.actor, "generation_config", None) is not None and self.actor.can_generate():
                    self.actor.generation_config.save_pretrained(d)
                if self.tok is not None:
                    self.tok.save_pretrained(d)
                with open(os.path.join(d, T.VERSION_FILE), "w") as f:
                    json.dump({"version": self.version, "weight_version": f"v{self.version}", "backend": "hf"}, f)
            crash("staged-weights")

    def health(self, req):
        h = super().health(req)
        h.update({"world_size": self.g.size, "sharding": P.sharding(self.g.mesh.device_type), "cpu_offload": self.cpu_offload})
        return h


def reference_cancelled():
    return T.reference.Cancelled


def die_with_torchrun():
    """torchrun starts each rank in a session of its own, so the supervisor's
    SIGKILL of torchrun's process group does not reach the ranks: each asks
    the kernel to kill it when its parent (torchrun's agent) dies (Linux)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:   # the agent died before the call
        os._exit(1)


def main(args, serve):
    """trainer.py under torchrun: every rank builds the trainer; rank 0
    serves HTTP (serve(tr)), the others run what it hands them."""
    die_with_torchrun()
    g = Group(args.device)
    try:
        tr = ShardedTrainer(args, g)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"trainer.py rank {g.rank}: {e}")
    if g.rank == 0:
        serve(tr)
    else:
        tr.serve_ranks()
