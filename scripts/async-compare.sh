#!/usr/bin/env bash
# make bench-async (issue 28): learn.toml on-policy, then learn-async.toml
# (max_staleness = 1: each step's rollouts start while the step before
# trains), back to back on the same worker, and their PPO phases compared:
# wall time, the trainer's and the rollouts' busy shares, the steps started
# ahead, and the learning figures. Needs what make demo needs (make deps dev);
# about 20 minutes on 2 cores. Prints a markdown table for docs/bench.md.
# ASYNC_CONFIGS names the campaigns (examples/campaigns/<name>.toml) to run,
# "learn learn-async" by default; e.g. ASYNC_CONFIGS=learn-oversample runs
# the oversampling one alone, and its table adds the carried, adopted and
# dropped rollouts. A config named more than once is run that many times,
# each under a name of its own (ASYNC_CONFIGS="learn learn learn": the
# 3-of-3 check of docs/learning.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${T1FLOW_HOME:-$ROOT/.t1flow}
cd "$ROOT"
PY=${PYTHON:-python3}

if ! { [ -f "$STATE/worker.pid" ] && kill -0 "$(cat "$STATE/worker.pid")" 2>/dev/null; }; then
  trap 'scripts/demo.sh stop-worker' EXIT
  scripts/demo.sh start-worker
fi

# The write-hello pools, as make demo imports them.
rm -rf "$STATE/learn"
go run ./examples/learn -out "$STATE/learn" -sft 32 -train 32 -heldout 16
bin/starter tasks import "$STATE/learn/sft" --pool hello-sft >/dev/null
bin/starter tasks import "$STATE/learn/train" --pool hello-train >/dev/null
bin/starter tasks import $(ls -d "$STATE"/learn/train/* | head -n 8) --pool hello-warmup >/dev/null
bin/starter tasks import "$STATE/learn/heldout" --pool hello-heldout >/dev/null

CONFIGS=${ASYNC_CONFIGS:-learn learn-async}
for cfg in $CONFIGS; do
  [ -f "examples/campaigns/$cfg.toml" ] || { echo "ASYNC_CONFIGS: examples/campaigns/$cfg.toml does not exist" >&2; exit 2; }
done
out=$(mktemp -d)
runs=()
i=0
for cfg in $CONFIGS; do
  # A name of its own per run: a campaign name is one campaign (and seeds
  # SFT's minibatch order, so a config named twice is two different runs).
  i=$((i + 1))
  run="$i-$cfg"
  runs+=("$run")
  name="$cfg-$(date +%s)"
  sed "s/^name = .*/name = \"$name\"/" "examples/campaigns/$cfg.toml" >"$out/$run.toml"
  start=$(date +%s)
  bin/starter campaign start -f "$out/$run.toml" --wait >"$out/$run.log" 2>&1 || { cat "$out/$run.log" >&2; exit 1; }
  echo "$cfg ($name): campaign wall time $(( $(date +%s) - start )) s (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  echo "$(( $(date +%s) - start ))" >"$out/$run.wall"
  bin/starter report "$name" --json >"$out/$run.json"
  bin/starter report "$name" --bars >"$out/$run.bars" 2>&1 || true
done

"$PY" - "$out" "${runs[@]}" <<'PY'
import json, sys, os
d = sys.argv[1]
rows = {}
over = {}
walls = {}
names = [r.split("-", 1)[1] for r in sys.argv[2:]]
for run in sys.argv[2:]:
    cfg = run.split("-", 1)[1]
    n = json.load(open(os.path.join(d, run + ".json")))
    walls[run] = int(open(os.path.join(d, run + ".wall")).read())
    if names.count(cfg) > 1:
        cfg = f"{cfg} #{run.split('-', 1)[0]}"
    t = n.get("ppo_timing") or {}
    ev = {e["label"]: e["resolved_rate"] for e in n.get("evals") or []}
    r = n["resolved_rate"]
    curve = (sum(r[-2:]) - sum(r[:2])) / 2 if len(r) >= 4 else float("nan")
    bars = sum(1 for l in open(os.path.join(d, run + ".bars")) if l.startswith("MISSED"))
    rows[cfg] = (t, ev, curve, bars, r, walls[run])
    if n.get("oversample"):
        over[cfg] = n["oversample"]
print("| campaign | campaign (s) | PPO phase (s) | trainer busy | rollouts busy | steps started ahead | PPO resolved per step | PPO curve (last 2 - first 2) | held-out base / SFT / final | bars missed |")
print("|---|---|---|---|---|---|---|---|---|---|")
for cfg, (t, ev, curve, bars, r, wall) in rows.items():
    steps = ", ".join(f"{x:.2f}" for x in r)
    print(f"| {cfg} | {wall} | {t.get('wall_seconds', 0):.0f} | {100 * t.get('trainer_busy_share', 0):.0f}% | {100 * t.get('rollouts_busy_share', 0):.0f}% | {t.get('started_ahead', 0)} | {steps} | {curve:+.2f} | {100 * ev.get('base', 0):.1f}% / {100 * ev.get('sft', 0):.1f}% / {100 * ev.get('final', 0):.1f}% | {bars} |")
if over:
    print("\n| campaign | carried (per step) | adopted and trained | adopted, stale | dropped | carried rollouts cancelled |")
    print("|---|---|---|---|---|---|")
    for cfg, o in over.items():
        j = lambda k: ", ".join(str(x) for x in o.get(k) or [])
        print(f"| {cfg} | {j('carried')} | {j('carried_in')} | {j('carried_stale')} | {j('dropped')} | {o.get('carried_dropped', 0)} |")
a = rows.get("learn", ({},))[0].get("wall_seconds")
b = rows.get("learn-async", ({},))[0].get("wall_seconds")
if a and b:
    print(f"\nPPO phase wall time, max_staleness 1 against on-policy: {b / a:.2f}x")
PY
