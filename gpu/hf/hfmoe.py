"""What the Hugging Face server and trainer share: loading a checkpoint,
routing capture and replay (R3) in the MoE blocks, the chat contract read off
the tokenizer's own chat template, and the model facts /get_model_info reports.

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
    # Mixtral's block always renormalises; Qwen3-MoE's and OLMoE's when the config says so.
    return getattr(block, "norm_topk_prob", True)


def routed_forward(self, hidden_states):
    """The MoE block's forward with capture, replay and jitter (see the module doc)."""
    ctl, li = self._t1_ctl, self._t1_layer
    B, T, H = hidden_states.shape
    if self.training and getattr(self, "jitter_noise", 0) > 0:
        raise RuntimeError("router_jitter_noise > 0 in training would change the routing R3 replays; set it to 0")
    flat = hidden_states.reshape(-1, H)
    router_logits = self.gate(flat)                                         # (N, E)
    probs = F.softmax(router_logits, dim=1, dtype=torch.float)              # as the model's own block
    if ctl.force is not None:
        sel = ctl.force[:, :, li, :].reshape(-1, self.top_k).to(flat.device)
    elif ctl.jitter > 0:
        noise = torch.randn(router_logits.shape, generator=ctl.generator, dtype=torch.float32).to(flat.device)
        sel = (router_logits.float() + ctl.jitter * noise).topk(self.top_k, dim=-1).indices
    else:
        sel = probs.topk(self.top_k, dim=-1).indices
    weights = probs.gather(1, sel)
    if _norm_topk(self):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(flat.dtype)
    if ctl.capture is not None:
        ctl.capture.append(sel.view(B, T, self.top_k))
    out = torch.zeros_like(flat)
    mask = F.one_hot(sel, num_classes=self.num_experts).permute(2, 1, 0)    # (E, k, N)
    for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero():
        slot, rows = torch.where(mask[e].squeeze(0))
        h = self.experts[e](flat[None, rows].reshape(-1, H)) * weights[rows, slot, None]
        out.index_add_(0, rows, h.to(flat.dtype))
    return out.view(B, T, H), router_logits


def moe_blocks(model):
    """The sparse MoE blocks, in forward order."""
    return [m for m in model.modules() if type(m).__name__.endswith("SparseMoeBlock") and hasattr(m, "gate") and hasattr(m, "experts")]


def install_routing(model):
    """Patch every MoE block; return the model's RouterControl (also model.t1_routing)."""
    blocks = moe_blocks(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no sparse MoE blocks (supported: Qwen3-MoE, OLMoE, Mixtral)")
    ctl = RouterControl(len(blocks), blocks[0].top_k, blocks[0].num_experts)
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
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=DTYPES[dtype], attn_implementation="sdpa")
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


def special_tokens(tok):
    """Every special (added) token's text -> ID."""
    out = {}
    for tid, t in tok.added_tokens_decoder.items():
        if t.special:
            out[t.content] = int(tid)
    return out


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


# ---- the chat contract -----------------------------------------------------
class ChatTemplateError(ValueError):
    pass


_SYS, _USER, _USER2, _ASST = "T1SYSTEMq7", "T1USERq7", "T1USERTWOq7", "T1ASSISTANTq7"


def chat_contract(tok, path):
    """The chat template as pieces: the first prompt is system_prefix + SYS +
    end_of_turn + turn_separator + user_prefix + OBS + end_of_turn +
    turn_separator + assistant_prefix, and a later turn appends the reply, then
    end_of_turn + turn_separator + user_prefix + OBS + end_of_turn +
    turn_separator + assistant_prefix. Read off the tokenizer's own template by
    rendering sentinel messages; a ChatTemplateError names the checkpoint's
    tokenizer_config.json when the template does not split that way."""
    where = os.path.join(path, "tokenizer_config.json")
    if os.path.exists(os.path.join(path, "chat_template.jinja")):
        where += " (chat_template.jinja)"

    def fail(why):
        raise ChatTemplateError(f"{where}: the chat template cannot be split into system/user/assistant prefixes, "
                                f"end of turn and separator: {why}")

    def render(msgs):
        try:
            return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        except Exception as e:  # a template without a system role raises from Jinja
            fail(f"rendering {[m['role'] for m in msgs]} failed: {e}")

    if not getattr(tok, "chat_template", None):
        fail("there is no chat_template")
    first = render([{"role": "system", "content": _SYS}, {"role": "user", "content": _USER}])
    i_s, i_u = first.find(_SYS), first.find(_USER)
    if i_s < 0 or i_u < i_s:
        fail(f"the system and user messages do not appear in order in {first!r}")
    system_prefix = first[:i_s]
    middle = first[i_s + len(_SYS):i_u]                 # end_of_turn + separator + user_prefix
    tail = first[i_u + len(_USER):]                     # end_of_turn + separator + assistant_prefix
    specials = sorted(special_tokens(tok), key=len, reverse=True)
    eot = next((s for s in specials if middle.startswith(s)), None)
    if eot is None:
        fail(f"the system turn does not end with a special token ({middle!r})")
    rest = middle[len(eot):]
    nxt = [rest.find(s) for s in specials if rest.find(s) >= 0]
    if not nxt:
        fail(f"the user turn does not open with a special token ({rest!r})")
    sep, user_prefix = rest[:min(nxt)], rest[min(nxt):]
    if not tail.startswith(eot + sep):
        fail(f"the user turn does not end as the system turn does ({tail!r})")
    assistant_prefix = tail[len(eot + sep):]
    c = {"system_prefix": system_prefix, "user_prefix": user_prefix, "assistant_prefix": assistant_prefix,
         "end_of_turn": eot, "turn_separator": sep}
    if first != system_prefix + _SYS + eot + sep + user_prefix + _USER + eot + sep + assistant_prefix:
        fail(f"the pieces do not rebuild {first!r}")
    two = render([{"role": "system", "content": _SYS}, {"role": "user", "content": _USER},
                  {"role": "assistant", "content": _ASST}, {"role": "user", "content": _USER2}])
    want = first + _ASST + eot + sep + user_prefix + _USER2 + eot + sep + assistant_prefix
    if two != want:
        fail(f"a second turn renders as {two!r}, not {want!r}")
    eot_id = tok.convert_tokens_to_ids(eot)
    if not isinstance(eot_id, int) or eot_id == tok.unk_token_id:
        fail(f"end of turn {eot!r} is not a single token")
    c["end_of_turn_id"] = int(eot_id)
    return c
