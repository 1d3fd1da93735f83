"""What the Hugging Face server and trainer share: loading a checkpoint,
routing capture and replay (R3) in the MoE blocks, and the model facts
/get_model_info reports (the chat contract is modelfiles.py's).

Routing: every sparse MoE block of a Qwen3-MoE, OLMoE or Mixtral model gets
its forward replaced (the module and its weights stay, so save_pretrained and
from_pretrained are untouched) by one that does what the model's own does --
router logits, softmax, top-k, renormalised when the config says so
(norm_topk_prob; Mixtral always) -- and, through the model's RouterControl:

- records the experts it used (capture), per MoE layer in model order;
- or uses the experts it is given (force: R3 replay), weighted by the live
  router's softmax over those experts, renormalised as the config does, so the
  router keeps its gradient;
- or, on the server only, selects from logits plus Gaussian noise (jitter), to
  model an inference engine whose routing differs from the trainer's.

Routing layout (SGLang's): (positions, MoE layers, top_k) int32. Layers are the
MoE layers only, in order (dense layers, e.g. Qwen3-MoE's mlp_only_layers, have
no routing).
"""
import importlib.util
import json
import os

import torch
import torch.nn.functional as F

# The chat contract and the special tokens: one copy, in the model-files sidecar.
from modelfiles import ChatTemplateError, chat_contract, special_tokens  # noqa: F401

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference")


def reference_module(name):
    """gpu/reference/NAME.py, loaded as reference_NAME: gpu/hf has files of
    the same names (server.py, trainer.py). gpu/reference must be on sys.path
    for its own imports."""
    spec = importlib.util.spec_from_file_location(f"reference_{name}", os.path.join(REFERENCE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def default_dtype(device):
    return "bfloat16" if str(device).startswith("cuda") else "float32"


class RouterControl:
    """Per-model routing state the patched MoE blocks read (one forward at a time)."""

    def __init__(self, n_layers, top_k, n_experts):
        self.n_layers, self.top_k, self.n_experts = n_layers, top_k, n_experts
        self.force = None      # (B, T, L, k) long: replay these experts
        self.capture = None    # list: each MoE block appends its (B, T, k) selection
        self.jitter = 0.0      # std of noise on router logits when selecting (server fault model)
        self.generator = None  # for the jitter noise


def _norm_topk(block):
    # Mixtral's router always renormalises; Qwen3-MoE's and OLMoE's when the config says so.
    return getattr(block.gate, "norm_topk_prob", True)


def routed_forward(self, hidden_states):
    """The MoE block's forward with capture, replay and jitter (see the module
    doc): the router's own computation (transformers 5's TopKRouter: logits of
    gate.weight, softmax in float32, top-k, renormalised as the config says),
    then the block's experts module with the chosen experts and weights."""
    ctl, li, g = self._t1_ctl, self._t1_layer, self.gate
    B, T, H = hidden_states.shape
    if self.training and getattr(self, "jitter_noise", 0) > 0:
        raise RuntimeError("router_jitter_noise > 0 in training would change the routing R3 replays; set it to 0")
    flat = hidden_states.reshape(-1, H)
    router_logits = F.linear(flat, g.weight)                                # (N, E)
    probs = F.softmax(router_logits, dim=-1, dtype=torch.float)             # as the model's own router
    if ctl.force is not None:
        sel = ctl.force[:, :, li, :].reshape(-1, g.top_k).to(flat.device)
    elif ctl.jitter > 0:
        noise = torch.randn(router_logits.shape, generator=ctl.generator, dtype=torch.float32).to(flat.device)
        sel = (router_logits.float() + ctl.jitter * noise).topk(g.top_k, dim=-1).indices
    else:
        sel = probs.topk(g.top_k, dim=-1).indices
    weights = probs.gather(1, sel)
    if _norm_topk(self):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(flat.dtype)
    if ctl.capture is not None:
        ctl.capture.append(sel.view(B, T, g.top_k))
    return self.experts(flat, sel, weights).view(B, T, H)


def moe_blocks(model):
    """The sparse MoE blocks, in forward order."""
    return [m for m in model.modules() if type(m).__name__.endswith("SparseMoeBlock") and hasattr(m, "gate") and hasattr(m, "experts")]


def install_routing(model):
    """Patch every MoE block; return the model's RouterControl (also
    model.t1_routing). A dense model (SmolLM2's Llama) has none: its control
    has no layers, and there is no routing to capture or replay (R3 off)."""
    blocks = moe_blocks(model)
    if not blocks:
        ctl = RouterControl(0, 0, 0)
        ctl.moe_layers = []
        ctl.n_hidden_layers = int(getattr(model.config, "num_hidden_layers", 0))
        model.t1_routing = ctl
        return ctl
    ctl = RouterControl(len(blocks), blocks[0].gate.top_k, blocks[0].gate.num_experts)
    # Which decoder layers hold them (SGLang's routing layout has every layer).
    layers = model.model.layers if hasattr(model, "model") and hasattr(model.model, "layers") else []
    ids = {id(b) for b in blocks}
    ctl.moe_layers = [i for i, layer in enumerate(layers) if any(id(m) in ids for m in layer.modules())] or list(range(len(blocks)))
    ctl.n_hidden_layers = int(getattr(model.config, "num_hidden_layers", len(blocks)))
    for i, b in enumerate(blocks):
        b._t1_ctl, b._t1_layer = ctl, i
        b.forward = routed_forward.__get__(b)
    model.t1_routing = ctl
    return ctl


class routing:
    """with routing(model, force=..., capture=True, jitter=...) as cap: ...
    cap is the list of per-layer selections; stacked(cap) gives (B, T, L, k)."""

    def __init__(self, model, force=None, capture=False, jitter=0.0, generator=None):
        self.ctl = model.t1_routing
        self.force, self.capture, self.jitter, self.generator = force, capture, jitter, generator

    def __enter__(self):
        c = self.ctl
        c.force, c.jitter, c.generator = self.force, self.jitter, self.generator
        c.capture = [] if self.capture else None
        return c.capture

    def __exit__(self, *exc):
        c = self.ctl
        c.force, c.capture, c.jitter, c.generator = None, None, 0.0, None


def stacked(capture, n_layers):
    """Per-layer (B, T, k) selections -> (B, T, L, k)."""
    if len(capture) != n_layers:
        raise RuntimeError(f"captured {len(capture)} MoE layers, the model has {n_layers} "
                           "(a forward ran twice, e.g. gradient checkpointing's recompute, with capture on)")
    return torch.stack(capture, dim=2)


# ---- checkpoints -----------------------------------------------------------
def check_dir(path, what="checkpoint"):
    if not path or not os.path.isdir(path):
        raise FileNotFoundError(f"{what} {path!r} is not a directory")
    if not os.path.exists(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"{what} {path}: config.json is missing (a Hugging Face checkpoint directory is expected)")


def load_model(path, device, dtype):
    """An HF MoE causal LM from a checkpoint directory, routing installed, eval mode."""
    from transformers import AutoModelForCausalLM

    check_dir(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], attn_implementation="sdpa")
    model.to(device)
    install_routing(model)
    model.eval()
    return model


def load_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def read_version(path):
    """The weight version a trainer-saved checkpoint records (t1flow.json), else the directory's name."""
    try:
        with open(os.path.join(path, "t1flow.json")) as f:
            return str(json.load(f)["weight_version"])
    except (OSError, ValueError, KeyError):
        return os.path.basename(os.path.normpath(path))


def context_length(model, override=0):
    n = int(getattr(model.config, "max_position_embeddings", 0) or 0) or 4096
    return min(n, override) if override and override > 0 else n


def config_json(model, path):
    """The checkpoint's config.json, verbatim when the directory has one."""
    p = os.path.join(path, "config.json")
    if os.path.isfile(p):
        with open(p) as f:
            return json.load(f)
    return model.config.to_dict()


def model_facts(model):
    ctl = model.t1_routing
    return {"num_layers": ctl.n_layers, "num_experts": ctl.n_experts, "top_k": ctl.top_k,
            "num_hidden_layers": ctl.n_hidden_layers, "moe_layers": list(ctl.moe_layers),
            "vocab_size": int(model.config.vocab_size), "architecture": type(model).__name__,
            "model_type": model.config.model_type,
            "norm_topk_prob": bool(getattr(model.config, "norm_topk_prob", True))}


def stop_ids(model, tok):
    """The end-of-sequence tokens: the generation config's, the model config's and the tokenizer's."""
    ids = set()
    for src in (getattr(model, "generation_config", None), model.config):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, (list, tuple)):
            ids.update(int(x) for x in e)
    if tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    return ids
