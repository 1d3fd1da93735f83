"""How the hf trainer's models are sharded: one function, parallelize(), in
the torchtitan manner. The models (transformers' causal LM, trainer.Critic)
know nothing of it.

- gradient checkpointing: transformers' own, per decoder layer (non-reentrant,
  so the R3 experts forced for the forward are forced again in the recompute);
- FSDP2 (`fully_shard`): each decoder layer is one unit, then the root (the
  embeddings, final norm, LM or value head): a layer's full parameters exist
  only while it runs;
- mixed precision on CUDA: bf16 parameters for compute, fp32 gradient
  reduction, fp32 sharded master weights and Adam states; on CPU (gloo) fp32
  throughout;
- every expert gets a gradient on every rank (zero for the experts no token
  of this rank's rows chose): FSDP2 reduce-scatters a unit's gradients as one
  buffer, so every rank must hold the same set; an expert whose gradient is
  then zero on every rank (no rank's tokens chose it) is skipped by the
  optimiser (skip_unused_experts), as one rank skips an expert with no
  gradient, rather than moved by Adam's momentum;
- optional CPU offload of the sharded parameters, gradients and optimiser
  states (the optimiser steps on the CPU).

torch 2.5 has fully_shard under torch.distributed._composable.fsdp, torch
2.6 and later under torch.distributed.fsdp: whichever exists is used. torch
2.5's FSDP2 needs CUDA: on a CPU there (gloo) the models are replicated
instead (composable DDP, `replicate`: the same gradients averaged over ranks,
no sharding), so the data-parallel split, the gathers, DCP and the commit are
still tested on a laptop; torch >= 2.6 shards on CPU too.
"""
import torch

import hfmoe

try:   # torch >= 2.6
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
except ImportError:   # torch 2.5
    from torch.distributed._composable.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard


def fsdp_on_cpu():
    """FSDP2 runs on CPU (gloo) from torch 2.6 on."""
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 6)


def sharding(device_type):
    """What parallelize() does on this device type: "fsdp2" or "ddp"."""
    return "fsdp2" if device_type == "cuda" or fsdp_on_cpu() else "ddp"


def decoder_layers(model):
    """The decoder layers of a causal LM or of a Critic (its backbone)."""
    body = getattr(model, "backbone", None) or model.get_decoder()
    return list(body.layers)


def _all_experts_in_graph(block, args, out):
    """Forward hook of an MoE block: its output plus zero times one element of
    every expert's parameters (the same values; every expert in the graph)."""
    zero = sum(p.reshape(-1)[0] for p in block.experts.parameters()) * 0.0
    if isinstance(out, tuple):   # transformers 4's blocks answer (hidden, router logits)
        h, logits = out
        return h + zero.to(h.dtype), logits
    return out + zero.to(out.dtype)   # transformers 5's: the hidden states alone


def parallelize(model, mesh, bf16, grad_ckpt=False, cpu_offload=False):
    """Shard model over mesh in place (FSDP2, per decoder layer, then the root)."""
    for block in hfmoe.moe_blocks(model):
        block.register_forward_hook(_all_experts_in_graph)
    if grad_ckpt and getattr(model, "supports_gradient_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif grad_ckpt:   # the Critic: its backbone is the transformers model
        model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mesh.device_type == "cpu" and not fsdp_on_cpu():
        from torch.distributed._composable import replicate

        replicate(model)
        return model
    kw = {"mesh": mesh}
    if bf16:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if cpu_offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def skip_unused_experts(opt, model):
    """Before each step of opt: drop the gradients of every expert no rank's
    tokens went through since the last step (each expert notes its own
    forward; one all-reduce of a flag per expert), so the optimiser leaves it
    alone, as one rank leaves an expert with no gradient."""
    import torch.distributed as dist

    # transformers 5 fuses a block's experts into 3D tensors (gate_up_proj,
    # down_proj): an unused expert's slice then gets a zero gradient on one
    # rank as on N, so there is nothing to skip. Per-expert modules (a
    # ModuleList) are not in one rank's graph when unused (no gradient at
    # all), but FSDP gives them zeros, which Adam would move on.
    experts = [e for b in hfmoe.moe_blocks(model) if isinstance(b.experts, torch.nn.ModuleList) for e in b.experts]
    if not experts:
        return

    def ran(mod, _args, _out):
        if torch.is_grad_enabled():
            mod._t1_ran = True
    for e in experts:
        e._t1_ran = False
        if not getattr(e, "_t1_hooked", False):   # a fresh optimiser on the same model: one note is enough
            e.register_forward_hook(ran)
            e._t1_hooked = True

    def pre_step(_opt, _args, _kwargs):
        flags = torch.tensor([float(e._t1_ran) for e in experts])
        if dist.get_backend() == "nccl":
            flags = flags.cuda()
        dist.all_reduce(flags)
        for e, used in zip(experts, flags.tolist()):
            e._t1_ran = False
            if not used:
                for p in e.parameters():
                    p.grad = None
    opt.register_step_pre_hook(pre_step)
