"""Tiny random Hugging Face checkpoints (MoE, and one dense Llama) for tests and benchmarks, built
offline: a config of the named architecture with random weights from a seed
(save_pretrained, safetensors), and a byte-level BPE tokenizer trained here on
built-in text with the real chat specials (<|endoftext|>, <|im_start|>,
<|im_end|>) and a Qwen-style chat_template, saved into the same directory.

    python gpu/hf/tiny.py --arch qwen3_moe|olmoe|mixtral|llama --out DIR [--seed N]
"""
import argparse
import os
import sys

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen2.5's template without tools: every turn is
# <|im_start|>ROLE\nCONTENT<|im_end|>\n; the generation prompt opens the assistant's.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# What the merges are learnt from: terminal-agent text, a few times over.
CORPUS = """You are an agent in a Linux terminal. Reply with a JSON object holding the
commands to type, and set task_complete when the task is done.
$ ls -la /app
total 12
drwxr-xr-x 2 root root 4096 Dec  1 06:25 .
-rw-r--r-- 1 root root  120 Dec  1 06:25 README.md
$ cat README.md | grep -n task
{"analysis": "the file lists the task", "commands": [{"keystrokes": "echo hello > out.txt\\n"}], "task_complete": false}
$ python3 -c 'print(sum(range(10)))'
45
The quick brown fox jumps over the lazy dog. 0123456789 !@#$%^&*()_+-=[]{};:'",.<>/?
"""

ARCHS = ("qwen3_moe", "olmoe", "mixtral", "llama", "llama-tied")


def build_tokenizer(vocab_size=512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


# Ten times Hugging Face's 0.02: large enough that the experts (and so the
# routing) matter to the output, which the routing and replay tests need.
ROUTING_INIT_RANGE = 0.2


def build_config(arch, vocab, eos, pad, initializer_range=ROUTING_INIT_RANGE):
    from transformers import LlamaConfig, MixtralConfig, OlmoeConfig, Qwen3MoeConfig

    common = dict(vocab_size=vocab, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                  max_position_embeddings=4096, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
                  tie_word_embeddings=False, num_experts_per_tok=2, initializer_range=initializer_range)
    if arch == "qwen3_moe":
        return Qwen3MoeConfig(num_key_value_heads=2, head_dim=16, intermediate_size=128, moe_intermediate_size=32,
                              num_experts=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], **common)
    if arch == "olmoe":
        return OlmoeConfig(num_key_value_heads=4, intermediate_size=32, num_experts=8, norm_topk_prob=False, **common)
    if arch == "mixtral":
        return MixtralConfig(num_key_value_heads=2, intermediate_size=32, num_local_experts=4, **common)
    if arch in ("llama", "llama-tied"):  # dense (no MoE layer): SmolLM2's architecture, for stock vLLM
        common.pop("num_experts_per_tok")
        # llama-tied ties the LM head to the embedding, as SmolLM2 does
        # (vLLM on CPU serves such a model untied: gpu/untied.go).
        common["tie_word_embeddings"] = arch == "llama-tied"
        # head_dim 64 as SmolLM2 (vLLM's CPU attention has no kernel for 16).
        common.update(num_attention_heads=2)
        return LlamaConfig(num_key_value_heads=1, head_dim=64, intermediate_size=128, **common)
    raise ValueError(f"--arch {arch!r} is none of {', '.join(ARCHS)}")


def build(arch, out, seed=0, initializer_range=ROUTING_INIT_RANGE):
    """Write a tiny random checkpoint of arch (weights and tokenizer) into out.
    initializer_range: the weights' std (0.02 is Hugging Face's default; the
    routing tests need the larger default here)."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer()
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = build_config(arch, len(tok), eos, eos, initializer_range)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=ARCHS)
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = ap.parse_args()
    build(args.arch, args.out, args.seed)
    print(f"tiny {args.arch} (seed {args.seed}) written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
