"""Benchmarks of the Hugging Face server and trainer (gpu/hf) on a tiny random
Qwen3-MoE: routing-capture overhead, the prefix cache on multi-turn episodes,
trainer tokens/s, and the train-inference log-prob gap with and without R3.
Prints a markdown section; with -out FILE it also replaces (or appends) the
"## Hugging Face backend" section of FILE (docs/bench.md).

    python gpu/hf/bench.py [-out docs/bench.md] [--device cuda --dtype bfloat16] [--json FILE]
    python gpu/hf/bench.py --sharded 1,2 [-out docs/bench.md]   # the sharded trainer only (its subsection)
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
sys.path.insert(0, os.path.join(HERE, "tests"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import batch as B  # noqa: E402  (gpu/reference)
import testkit  # noqa: E402
import tiny  # noqa: E402
from helpers import SYSTEM, make_engine, make_trainer  # noqa: E402

SECTION = "## Hugging Face backend"
SHARDED = "### Sharded trainer (torchrun)"


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def capture_overhead(model, dev, reps=6, n_new=64):
    """Decoding tokens/s of the same requests without and with routing capture, interleaved."""
    eng = make_engine(model, *dev, disable_radix_cache=True)   # capture only when asked
    prompt = testkit.prompt_ids(eng, SYSTEM, "bench prompt: list the files in /app and count them")
    plain = cap = 0.0
    eng.generate({"input_ids": prompt, "sampling_params": {"max_new_tokens": 4}})   # warm up
    for i in range(reps):
        req = {"input_ids": prompt, "return_logprob": True,
               "sampling_params": {"max_new_tokens": n_new, "seed": i, "stop_token_ids": []}}
        for want in ((False, True) if i % 2 else (True, False)):   # alternate which goes first
            s = timed(lambda: eng.generate(dict(req, return_routed_experts=want)))[1]
            plain, cap = (plain, cap + s) if want else (plain + s, cap)
    return reps * n_new / plain, reps * n_new / cap


def multi_turn(model, dev, turns=4, per_turn=24, episodes=2):
    speed, ctx = {}, 0
    for cache in (True, False):
        eng = make_engine(model, *dev, **({} if cache else {"disable_radix_cache": True}))
        t0 = time.perf_counter()
        made = [testkit.episode(eng, testkit.prompt_ids(eng, SYSTEM, f"episode {i}"), turns=turns, max_new=per_turn,
                                seed=i, observation="x" * 200 + "\n") for i in range(episodes)]
        speed[cache] = sum(sum(t["loss_mask"]) for t in made) / (time.perf_counter() - t0)
        ctx = len(made[-1]["tokens"])
    return speed, ctx


def trainer_speed(model, dev, tmp, n=8, max_new=96):
    eng = make_engine(model, *dev)
    trajs = [testkit.episode(eng, testkit.prompt_ids(eng, SYSTEM, f"task {i}"), max_new=max_new, seed=i) for i in range(n)]
    d = testkit.write_batch(os.path.join(tmp, "b"), trajs, [i / n for i in range(n)])
    tokens = sum(len(t["tokens"]) for t in trajs)
    tr = make_trainer(os.path.join(tmp, "w"), model, *dev)
    _, s_sft = timed(lambda: tr._run("sft", {"key": "bench/sft", "batch_dir": d, "hyper": {"epochs": 2}}, tr.sft))
    res, s_ppo = timed(lambda: tr._run("ppo_step", {"key": "bench/ppo", "batch_dir": d}, tr.ppo_step))
    return tokens, s_sft, s_ppo, res


def gaps(model, dev, tmp, label, n=4, max_new=48, **flags):
    eng = make_engine(model, *dev, **flags)
    trajs = [testkit.episode(eng, testkit.prompt_ids(eng, SYSTEM, f"task {i}"), turns=2, max_new=max_new // 2, seed=i,
                             temperature=0.8) for i in range(n)]
    d = testkit.write_batch(os.path.join(tmp, "g" + label), trajs, [0.5] * n)
    tr = make_trainer(os.path.join(tmp, "w" + label), model, *dev)
    _, tt = tr._load_batch({"batch_dir": d}, need_routing=True)
    g = tr.logprob_gaps(B.pad(tt, tr.device))
    return {"free_mean": float(g["gap_free"].mean()), "replay_mean": float(g["gap_replay"].mean()),
            "free_max": float(g["gap_free"].max()), "replay_max": float(g["gap_replay"].max()),
            "flips": float(g["flips"].float().mean())}


def peak_rss_mb(parent):
    """Peak resident memory (VmHWM, MB) of each child process of parent (the ranks of a torchrun)."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != parent:
                    continue
            with open(f"/proc/{pid}/status") as f:
                out += [int(l.split()[1]) / 1024 for l in f if l.startswith("VmHWM:")]
        except (OSError, ValueError, IndexError):
            pass
    return out


def sharded_speed(model, batch_dir, ranks, tmp, threads):
    """sft (2 epochs) and ppo_step of the same batch, one minibatch of all 8
    trajectories (the same global batch at any world size), through the
    sharded trainer under torchrun; tokens/s from the trainer's own timing
    (the training, not the commit) and each rank's peak memory."""
    import signal
    import subprocess

    from test_cli import call, free_port, wait_healthy

    port, log = free_port(), os.path.join(tmp, f"sharded-{ranks}.log")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           os.path.join(HERE, "trainer.py"), "--port", str(port), "--workdir", os.path.join(tmp, f"sw{ranks}"),
           "--device", "cpu", "--init", model, "--threads", str(threads or 1)]
    p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads or 1)))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, p, log, timeout=600)
        hyper = {"epochs": 2, "minibatches": 1, "update_epochs": 2}
        _, sft = call(url, "/sft", {"key": "bench/sft", "batch_dir": batch_dir, "hyper": hyper})
        _, ppo = call(url, "/ppo_step", {"key": "bench/ppo", "batch_dir": batch_dir, "hyper": hyper})
        sharding = call(url, "/health")[1]["sharding"]
        rss = peak_rss_mb(p.pid)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return {"ranks": ranks, "sharding": sharding, "sft_tps": 2 * sft["tokens"] / sft["seconds"],
            "ppo_tps": ppo["tokens"] / ppo["seconds"], "rss_mb": rss}


def run_sharded(args):
    res = {"torch": torch.__version__, "load": os.getloadavg()[0], "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny.build(args.arch, os.path.join(tmp, "model"), seed=0)
        eng = make_engine(model, "--device", "cpu")
        trajs = [testkit.episode(eng, testkit.prompt_ids(eng, SYSTEM, f"task {i}"), max_new=96, seed=i) for i in range(8)]
        d = testkit.write_batch(os.path.join(tmp, "b"), trajs, [i / 8 for i in range(8)])
        res["batch_tokens"] = sum(len(t["tokens"]) for t in trajs)
        for n in args.sharded:
            res["runs"].append(sharded_speed(model, d, n, tmp, args.threads))
    return res


def sharded_markdown(res):
    out = [SHARDED, "", f"`python gpu/hf/bench.py --sharded 1,2 -out docs/bench.md`: the same tiny model, CPU (gloo), "
           f"float32, PyTorch {res['torch']}, 1 thread per rank, {os.cpu_count()} CPUs (load average {res['load']:.1f} before "
           f"the run); one global batch of 8 trajectories ({res['batch_tokens']} tokens) per step at every world size, "
           "split over the ranks. Tokens/s is the trainer's own timing of the operation (not the commit); memory is "
           "each rank's peak RSS (torch, transformers, the model, its shards).\n",
           "| ranks | sharding | sft tokens/s (2 epochs) | ppo_step tokens/s | peak RSS per rank (MB) |", "|---|---|---|---|---|"]
    for r in res["runs"]:
        out.append(f"| {r['ranks']} | {r['sharding']} | {r['sft_tps']:.0f} | {r['ppo_tps']:.0f} | "
                   f"{', '.join(f'{m:.0f}' for m in sorted(r['rss_mb']))} |")
    out.append("\nOn torch 2.5's CPU `sharding` is ddp (FSDP2 needs CUDA there): the memory per rank is the whole model; "
               "with FSDP2 each rank holds 1/N of the states. The model is so small that the gathers and Python "
               "overhead dominate: the figures show the cost of the group, not a real model's scaling.\n")
    return "\n".join(out) + "\n"


def splice_sub(path, sub):
    """Replace the sharded subsection inside the HF section of path, or add it at the section's end."""
    text = open(path).read()
    start = text.find(SECTION + "\n")
    if start < 0:
        raise SystemExit(f"{path}: no '{SECTION}' section to add the sharded figures to (run bench.py -out first)")
    end = text.find("\n## ", start + len(SECTION))
    end = len(text) if end < 0 else end + 1
    body = text[start:end]
    at = body.find(SHARDED + "\n")
    body = (body[:at] if at >= 0 else body.rstrip("\n") + "\n\n") + sub
    with open(path, "w") as f:
        f.write(text[:start] + body + text[end:])


def run(args):
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = ["--device", args.device] + (["--dtype", args.dtype] if args.dtype else [])
    res = {"device": args.device, "dtype": args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"),
           "torch": torch.__version__, "threads": torch.get_num_threads(), "load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny.build(args.arch, os.path.join(tmp, "model"), seed=0)
        res["plain_tps"], res["capture_tps"] = capture_overhead(model, dev)
        if not args.quick:
            speed, res["episode_ctx"] = multi_turn(model, dev)
            res["cache_tps"], res["nocache_tps"] = speed[True], speed[False]
        tokens, s_sft, s_ppo, r = trainer_speed(model, dev, tmp)
        res.update(batch_tokens=tokens, sft_s=s_sft, ppo_s=s_ppo, approx_kl=r["approx_kl"], clipfrac=r["clipfrac"])
        dt = res["dtype"]
        res["gaps"] = {f"{dt} sampler": gaps(model, dev, tmp, "exact"),
                       f"{dt} sampler, router jitter 1.0": gaps(model, dev, tmp, "jitter", router_jitter=1.0)}
        if not args.quick and not args.device.startswith("cuda"):
            res["gaps"]["bfloat16 sampler"] = gaps(model, dev[:2], tmp, "bf16", dtype="bfloat16")
    return res


def markdown(res, arch):
    out = [SECTION, ""]
    out.append(f"`make bench-hf` (gpu/hf/bench.py): a tiny random {arch} (tiny.py: 3 layers × d 64, 8 experts top-2), "
               f"{res['device']}, {res['dtype']}, PyTorch {res['torch']}, {res['threads']} threads, measured "
               f"{time.strftime('%Y-%m-%d', time.gmtime())} ({os.cpu_count()} CPUs, load average {res['load']:.1f} before the run). The model is so small that Python overhead dominates: "
               "the figures compare, they do not predict a real model's speed.\n")
    out.append("| what | figure | note |\n|---|---|---|")
    out.append(f"| inference, generated tokens/s, without routing capture | {res['plain_tps']:.0f} | --disable-radix-cache |")
    out.append(f"| inference, generated tokens/s, with routing capture | {res['capture_tps']:.0f} | "
               f"capture overhead {res['plain_tps'] / res['capture_tps']:.2f}× (target ≤ 1.10×) |")
    if "cache_tps" in res:
        out.append(f"| inference, generated tokens/s, 4-turn episodes, prefix cache | {res['cache_tps']:.0f} | "
                   f"{res['cache_tps'] / res['nocache_tps']:.2f}× the uncached figure; episodes end at ~{res['episode_ctx']} tokens |")
        out.append(f"| inference, generated tokens/s, 4-turn episodes, --disable-radix-cache | {res['nocache_tps']:.0f} | "
                   "every turn re-runs (and re-routes) its whole context |")
    t = res["batch_tokens"]
    out.append(f"| trainer sft, tokens/s (2 epochs over 8 trajectories) | {2 * t / res['sft_s']:.0f} | {t} tokens per epoch; includes the commit |")
    out.append(f"| trainer ppo_step, tokens/s | {t / res['ppo_s']:.0f} | {res['ppo_s']:.2f} s per step (2 update epochs × 4 minibatches, "
               f"critic, commit); approx_kl {res['approx_kl']:.2g}, clipfrac {res['clipfrac']:.2f} |")
    out.append("\nTrain–inference log-prob gap, |Δ log-prob| over generated tokens of 2-turn episodes at temperature 0.8 "
               f"(trainer in {res['dtype']}):\n")
    out.append("| sampler | without R3 (mean / max) | with R3 (mean / max) | tokens whose routing flipped (any layer) |\n|---|---|---|---|")
    for k, g in res["gaps"].items():
        out.append(f"| {k} | {g['free_mean']:.2g} / {g['free_max']:.2g} | {g['replay_mean']:.2g} / {g['replay_max']:.2g} | {100 * g['flips']:.1f}% |")
    out.append("\nRouter jitter stands for an inference engine whose routing differs from the trainer's; with R3 the "
               "trainer replays the sampler's experts and the gap is float noise. The prefix cache gains little here: "
               "the tiny model's prefill costs less than the per-token Python overhead of decoding. "
               "This section alone: `make bench-hf`.\n")
    return "\n".join(out) + "\n"


def splice(path, section):
    """Replace the HF section of path (up to the next '## ' heading), or append it."""
    text = open(path).read() if os.path.exists(path) else ""
    start = text.find(SECTION + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        old = text[start:end if end >= 0 else len(text)]
        kept = old[old.find(SHARDED + "\n"):] if SHARDED + "\n" in old else ""   # bench.py --sharded's figures
        text = text[:start] + section + ("\n" + kept.rstrip("\n") + "\n" if kept else "") + (text[end + 1:] if end >= 0 else "")
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-out", "--out", help="markdown file whose HF section to replace or append")
    ap.add_argument("--arch", default="qwen3_moe", choices=tiny.ARCHS)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="skip the multi-turn and bf16-sampler figures")
    ap.add_argument("--json", help="also write the figures as JSON here")
    ap.add_argument("--sharded", type=lambda v: [int(x) for x in v.split(",")],
                    help="only the sharded trainer's figures at these world sizes (e.g. 1,2), CPU")
    args = ap.parse_args()
    if args.sharded:
        res = run_sharded(args)
        md = sharded_markdown(res)
        print(md)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=2)
        if args.out:
            splice_sub(args.out, md)
        return
    res = run(args)
    md = markdown(res, args.arch)
    print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    if args.out:
        splice(args.out, md)


if __name__ == "__main__":
    main()
