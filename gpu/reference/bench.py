"""Benchmarks of the reference trainer and inference server on this machine;
prints a markdown section for docs/bench.md (bench/main.go includes it).
--quick: the same section at a tiny size (bench/smoke_test.go)."""
import argparse
import os
import sys
import tempfile
import time
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
import batch as B  # noqa: E402
from helpers import episode, make_engine, make_trainer, rollout, write_batch  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="every figure at a tiny size (a smoke run, not a measurement)")
    quick = ap.parse_args().quick
    # Sizes: new tokens and repetitions of the decoding rows; turns, tokens per
    # turn and episodes of the multi-turn rows; trajectories and their new
    # tokens for the trainer rows; rollouts and new tokens for the gap rows.
    n_new, reps, turns, per_turn, episodes, n_traj, traj_new, n_gap, gap_new = (
        (16, 1, 2, 8, 1, 2, 16, 2, 8) if quick else (128, 4, 6, 32, 3, 8, 192, 6, 64))
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # Inference: the same requests with and without routing capture, interleaved.
        eng = make_engine(seed=0, radix_cache=False)   # the same prompt each time: measure decoding, not the cache
        prompt = [257] + list(b"bench prompt: list the files in /app and count them")
        plain = capture = 0.0
        for i in range(reps):
            req = {"input_ids": prompt, "sampling_params": {"max_new_tokens": n_new, "seed": i, "stop_token_ids": []}}
            _, a = timed(lambda: eng.generate(dict(req, return_logprob=True)))
            _, b = timed(lambda: eng.generate(dict(req, return_logprob=True, return_routed_experts=True)))
            plain, capture = plain + a, capture + b
        tok_plain, tok_cap = reps * n_new / plain, reps * n_new / capture
        rows.append(("inference, generated tokens/s, without routing capture", f"{tok_plain:.0f}", ""))
        rows.append(("inference, generated tokens/s, with routing capture", f"{tok_cap:.0f}", f"capture overhead {plain and capture / plain:.2f}×"))

        # Multi-turn episodes (each turn resends the whole history), prefix cache on and off.
        speed = {}
        for cache in (True, False):
            e = make_engine(seed=0, radix_cache=cache)
            t0 = time.perf_counter()
            made = [episode(e, prompt, turns=turns, max_new=per_turn, seed=i, output="x" * 200 + "\n") for i in range(episodes)]
            speed[cache] = sum(b - a for t in made for a, b in t["turns"]) / (time.perf_counter() - t0)
        ctx = int(made[-1]["tokens"].shape[0])
        rows.append((f"inference, generated tokens/s, {turns}-turn episodes, prefix cache", f"{speed[True]:.0f}",
                     f"{speed[True] / speed[False]:.2f}× the uncached figure; episodes end at ~{ctx} tokens"))
        rows.append((f"inference, generated tokens/s, {turns}-turn episodes, --disable-radix-cache", f"{speed[False]:.0f}",
                     "every turn re-runs (and re-routes) its whole context"))

        # Trainer throughput on a batch of sampled trajectories.
        trajs = [rollout(eng, prompt, max_new=traj_new, seed=i) for i in range(n_traj)]
        d = write_batch(os.path.join(tmp, "b"), trajs, [i / n_traj for i in range(n_traj)])
        tokens = sum(int(t["tokens"].shape[0]) for t in trajs)
        tr = make_trainer(os.path.join(tmp, "w"), seed=0)
        res, s = timed(lambda: tr._run("sft", {"key": "bench/sft", "batch_dir": d, "hyper": {"epochs": 2}}, tr.sft))
        rows.append((f"trainer sft, tokens/s (2 epochs over {n_traj} trajectories)", f"{2 * tokens / s:.0f}", f"{tokens} tokens per epoch"))
        tr2 = make_trainer(os.path.join(tmp, "w2"), seed=0)
        res, s = timed(lambda: tr2._run("ppo_step", {"key": "bench/ppo", "batch_dir": d}, tr2.ppo_step))
        rows.append(("trainer ppo_step, tokens/s (old/free forwards, update epochs × minibatches, critic)",
                     f"{tokens / s:.0f}", f"{s:.2f} s per step; approx_kl {res['approx_kl']:.2g}, clipfrac {res['clipfrac']:.2f}"))

        # Train-inference log-prob gap, bf16 sampling against the fp32 trainer.
        gaps = {}
        for dtype in ("bfloat16", "float32"):
            e = make_engine(seed=5, sample_dtype=dtype)
            ts = [rollout(e, [257] + list(b"task %d" % i), max_new=gap_new, seed=i) for i in range(n_gap)]
            dd = write_batch(os.path.join(tmp, "g" + dtype), ts, [0.5] * n_gap)
            t3 = make_trainer(os.path.join(tmp, "w" + dtype), seed=5)
            cfg = t3.actor.cfg
            _, tt = B.load(dd, cfg.n_layer, cfg.n_experts, cfg.top_k, True)
            g = t3.logprob_gaps(B.pad(tt, "cpu"))
            gaps[dtype] = (float(g["gap_replay"].mean()), float(g["gap_free"].mean()), float(g["flips"].float().mean()))
    print("## Reference trainer and inference (CPU)\n")
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, model {cfg.n_layer} layers × d {cfg.d_model}, "
          f"{cfg.n_experts} experts top-{cfg.top_k}.\n")
    print("| what | figure | note |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print("\nTrain–inference log-prob gap (mean |Δ log-prob| over generated tokens; trainer in float32):\n")
    print("| sampler | without R3 | with R3 | tokens whose routing flipped (any layer) |\n|---|---|---|---|")
    for dtype, (rep, free, flips) in gaps.items():
        print(f"| {dtype} | {free:.4f} | {rep:.4f} | {100 * flips:.1f}% |")
    print("\nThe paper reports 0.021 → 0.013 at 122B (bf16 sampling); here the model is tiny and random,"
          " so the absolute gaps differ, but replay removes the part of the gap that routing flips cause.")


if __name__ == "__main__":
    main()
