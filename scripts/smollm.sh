#!/usr/bin/env bash
# make smollm: SmolLM2-135M-Instruct end to end on stock vLLM (issue 22). A
# worker with every role runs in the background: Docker sandboxes, the hf
# trainer, stock vLLM serving the checkpoint (-inference-engine vllm) and the
# model-files sidecar. The write-word pools (or T1FLOW_SMOLLM_FAMILY's, below)
# are built and imported, then examples/campaigns/smollm.toml (or
# T1FLOW_SMOLLM_CAMPAIGN) runs: SFT, critic warm-up, PPO steps, and evals of
# the base, SFT and final checkpoints on the held-out pool.
# docs/model-rollouts.md, "SmolLM2 on stock vLLM", and docs/learning.md ("The
# multiply family") have the figures measured.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=$(realpath -m "${T1FLOW_HOME:-$ROOT/.t1flow}")
# Absolute: the sandboxes bind-mount the verifier toolchain from under it.
export T1FLOW_HOME=$STATE
MODEL=${SMOLLM2:-$STATE/models/smollm2-135m}
CAMPAIGN=${T1FLOW_SMOLLM_CAMPAIGN:-examples/campaigns/smollm.toml}
# Pool sizes and names: the campaign file's [pools] must name these pools
# (T1FLOW_SMOLLM_POOLS=wq with smollm-quick.toml, whose sizes are 16 24 6 2: SFT, train, held-out, warm-up).
# T1FLOW_SMOLLM_FAMILY: examples/learn's -family (words; smollm-product.toml: product).
# T1FLOW_SMOLLM_FAMILY_FLAGS: more flags for examples/learn (smollm-check.toml: -rl-templates).
FAMILY=${T1FLOW_SMOLLM_FAMILY:-words}
POOLS=${T1FLOW_SMOLLM_POOLS:-words}
read -r N_SFT N_TRAIN N_HELDOUT N_WARMUP <<<"${T1FLOW_SMOLLM_SIZES:-32 64 24 8}"
# Its own sandbox host name: another worker on this machine under the
# default (the hostname) would take these sandboxes for its orphans.
HOST=${T1FLOW_SMOLLM_HOST:-smollm-$(hostname)}
NAME=$(sed -n 's/^name *= *"\(.*\)".*/\1/p' "$CAMPAIGN" | head -n 1)
PIDFILE=$STATE/smollm-worker.pid
LOG=$STATE/smollm-worker.log
cd "$ROOT"

stop_worker() {
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    # The worker stops vLLM's process group, the trainer and the sidecar.
    kill "$(cat "$PIDFILE")" && echo "smollm: worker stopped" >&2
    for _ in $(seq 1 60); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$PIDFILE"
}

if [ "${1:-}" = stop-worker ]; then
  stop_worker
  exit 0
fi
[ -f "$MODEL/config.json" ] || { echo "smollm: no checkpoint at $MODEL: run make smollm2" >&2; exit 1; }
[ -n "$NAME" ] || { echo "smollm: $CAMPAIGN has no name" >&2; exit 1; }

t0=$(date +%s)
stamp() { echo "smollm: $1 at +$(( $(date +%s) - t0 ))s (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2; }

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "smollm: reusing the worker (pid $(cat "$PIDFILE"))" >&2
else
  rm -f "$STATE/inference.url"
  bin/worker -role all -log-level warn -host "$HOST" -gpu-backend hf -model "$MODEL" -inference-engine vllm -gpus cpu >>"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  trap stop_worker EXIT
  echo "smollm: worker started (pid $!, log $LOG, vLLM's log $STATE/logs/inference.log); waiting for the trainer and vLLM (1-7 minutes on 2 cores)" >&2
  for _ in $(seq 1 1800); do
    [ -s "$STATE/inference.url" ] && grep -q "trainer .* on " "$LOG" && break
    kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { echo "smollm: the worker exited; see $LOG" >&2; tail -n 20 "$LOG" >&2; exit 1; }
    sleep 1
  done
  stamp "worker ready"
fi

echo "== 1. the $FAMILY family: SFT, training, warm-up and held-out pools"
W=$STATE/$POOLS
rm -rf "$W"
# shellcheck disable=SC2086 # T1FLOW_SMOLLM_FAMILY_FLAGS: more flags of examples/learn, split on spaces
go run ./examples/learn -family "$FAMILY" -out "$W" -sft "$N_SFT" -train "$N_TRAIN" -heldout "$N_HELDOUT" ${T1FLOW_SMOLLM_FAMILY_FLAGS:-}
bin/starter tasks import "$W/sft" --pool "$POOLS-sft"
bin/starter tasks import "$W/train" --pool "$POOLS-train"
bin/starter tasks import $(ls -d "$W"/train/* | head -n "$N_WARMUP") --pool "$POOLS-warmup"
bin/starter tasks import "$W/heldout" --pool "$POOLS-heldout"
stamp "pools imported"

echo
echo "== 2. the campaign $NAME ($CAMPAIGN): SFT, critic warm-up, PPO, evals on the held-out pool"
bin/starter campaign start -f "$CAMPAIGN" --wait
stamp "campaign done"
bin/starter report "$NAME" --html "$STATE/$NAME-report.html"
echo "report: $STATE/$NAME-report.html (bin/starter report $NAME --json for the numbers)"
echo "issue 27's learning bars (docs/learning.md):"
bin/starter report "$NAME" --bars || echo "smollm: the campaign finished but missed a learning bar (above)"
