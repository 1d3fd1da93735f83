#!/usr/bin/env bash
# The HF backend on a CUDA machine, in under 5 minutes: the env, a tiny
# Qwen3-MoE, server.py and trainer.py as the supervisor runs them (bf16 on
# CUDA, over HTTP), then bench.py on CUDA in bfloat16 and in float32: tokens/s
# with and without routing capture, trainer tokens/s, the replay gap with and
# without R3. Results go to $OUT (when set) and to stdout.
#
#   gpu/hf/device_check.sh                 # CUDA
#   DEVICE=cpu T1FLOW_HF_PYTHON=.t1flow/hfenv/bin/python gpu/hf/device_check.sh   # a dry run on CPU
#
# The sharded trainer runs at world size 1 (tests/test_sharded.py).
#
# Python: $T1FLOW_HF_PYTHON, else the pinned env (scripts/ensure-hf-env.sh),
# else -- on a machine that cannot fetch packages -- its python3 (which must
# have torch) with the pinned transformers, tokenizers and huggingface-hub
# installed from gpu/hf/.whl: fetch those here first (14 MB, hashes checked)
# with `gpu/hf/device_check.sh --fetch-wheels` and carry gpu/hf/.whl.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHL=${T1FLOW_HF_WHEELS:-$ROOT/gpu/hf/.whl}
if [ "${1:-}" = --fetch-wheels ]; then
  exec python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$WHL" -r "$ROOT/gpu/hf/requirements-device.txt"
fi
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-}
RES=${OUT:-$(mktemp -d)}
mkdir -p "$RES"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
cd "$ROOT"
start=$(date +%s)

PY=${T1FLOW_HF_PYTHON:-}
if [ -z "$PY" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
  # Carried wheels: a machine that cannot fetch (no time spent trying to).
  echo "device_check: python3 with the pinned transformers from $WHL" >&2
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hfsite "$WHL"/*.whl &&
    export PYTHONPATH=/tmp/hfsite${PYTHONPATH:+:$PYTHONPATH}
  PY=python3
elif [ -z "$PY" ]; then
  if timeout 150 scripts/ensure-hf-env.sh; then
    PY=${T1FLOW_HOME:-$ROOT/.t1flow}/hfenv/bin/python
  else
    echo "device_check: the pinned env could not be made here; trying python3 as it is" >&2
    PY=python3
  fi
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "python: $PY"
  "$PY" -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
} | tee "$RES/env.txt"
if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "device_check: no CUDA device visible to $PY" >&2
  exit 1
fi

rc=0
SCALE=1 THREADS=()
# A CPU dry run is slower (the limits are for CUDA), and on a shared CPU one thread beats torch's default.
[ "$DEVICE" = cpu ] && SCALE=3 THREADS=(--threads 1)
step() {   # step NAME SECONDS CMD...: run with a limit, log to $RES/NAME.log
  local name=$1 limit=$(( $2 * SCALE ))
  shift 2
  echo "== $name (limit ${limit}s, at +$(( $(date +%s) - start ))s)"
  if timeout "$limit" "$@" >"$RES/$name.log" 2>&1; then
    echo "   ok"
  else
    echo "   FAILED (rc $?); the log's end:"
    tail -20 "$RES/$name.log"
    rc=1
  fi
}

# server.py and trainer.py with the supervisor's command lines, on $DEVICE
# (bf16 by default there), over HTTP: generate with routing, sft, save, load.
step http 100 env T1FLOW_HF_TEST_DEVICE="$DEVICE" "$PY" -m pytest -q -p no:cacheprovider gpu/hf/tests/test_cli.py
# The sharded trainer (sharded.py) at world size 1 under torchrun, as
# -trainer-ranks 1 runs it: FSDP2 in bf16 with fp32 reduction on CUDA; sft,
# ppo_step, the sharded export; killed mid-step, resumed from its DCP
# checkpoint, the key trained once (tests/test_sharded.py).
step sharded 150 env T1FLOW_HF_TEST_DEVICE="$DEVICE" T1FLOW_HF_TEST_RANKS=1 "$PY" -m pytest -q -p no:cacheprovider gpu/hf/tests/test_sharded.py
# The figures: bf16 (the default on CUDA; CPU bf16 is too slow for a dry
# run) and float32 (R3 exact to float noise).
[ "$DEVICE" = cpu ] || step bench-bf16 120 "$PY" gpu/hf/bench.py --device "$DEVICE" --dtype bfloat16 --quick "${THREADS[@]}" --json "$RES/bench-bf16.json"
step bench-fp32 100 "$PY" gpu/hf/bench.py --device "$DEVICE" --dtype float32 --quick "${THREADS[@]}" --json "$RES/bench-fp32.json"

"$PY" - "$RES" <<'EOF' | tee "$RES/summary.md"
import json, os, sys
res = sys.argv[1]
print("| dtype | tokens/s plain | tokens/s with capture | overhead | sft tokens/s | ppo_step s | gap without R3 (mean/max) | gap with R3 (mean/max) | jittered: without / with R3 (max) |")
print("|---|---|---|---|---|---|---|---|---|")
for dt in ("bf16", "fp32"):
    p = os.path.join(res, f"bench-{dt}.json")
    if not os.path.exists(p):
        print(f"| {dt} | (no result) |||||||")
        continue
    r = json.load(open(p))
    g = list(r["gaps"].values())
    print(f"| {r['dtype']} | {r['plain_tps']:.0f} | {r['capture_tps']:.0f} | {r['plain_tps'] / r['capture_tps']:.2f}x | "
          f"{2 * r['batch_tokens'] / r['sft_s']:.0f} | {r['ppo_s']:.2f} | {g[0]['free_mean']:.2g}/{g[0]['free_max']:.2g} | "
          f"{g[0]['replay_mean']:.2g}/{g[0]['replay_max']:.2g} | {g[1]['free_max']:.2g} / {g[1]['replay_max']:.2g} |")
EOF
echo "device_check: done in $(( $(date +%s) - start )) s, rc $rc; results in $RES"
exit $rc
