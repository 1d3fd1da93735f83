#!/usr/bin/env bash
# make demo: a small campaign on the local defaults. A worker with every role
# runs in the background (Docker sandboxes, the reference trainer and
# inference server); the example tasks are imported and checked with the
# oracle; tasks are synthesized from examples/seeds and audited; then the
# campaign in examples/campaigns/demo.toml runs SFT, critic warm-up, PPO steps
# and evals of the base, SFT and final checkpoints.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${T1FLOW_HOME:-$ROOT/.t1flow}
PIDFILE=$STATE/worker.pid
LOG=$STATE/worker.log
cd "$ROOT"

stop_worker() {
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    kill "$(cat "$PIDFILE")" && echo "demo: worker stopped" >&2
  fi
  rm -f "$PIDFILE"
}

if [ "${1:-}" = stop-worker ]; then
  stop_worker
  exit 0
fi

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "demo: reusing the worker (pid $(cat "$PIDFILE"))" >&2
else
  bin/worker -role all -log-level warn >>"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  trap stop_worker EXIT
  echo "demo: worker started (pid $!, log $LOG); waiting for the trainer and inference server" >&2
  for _ in $(seq 1 120); do
    [ -s "$STATE/inference.url" ] && grep -q "trainer on" "$LOG" && break
    kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { echo "demo: the worker exited; see $LOG" >&2; tail -n 20 "$LOG" >&2; exit 1; }
    sleep 1
  done
fi

echo "== 1. example tasks, checked with the oracle"
bin/starter tasks import examples/tasks --pool examples
bin/starter eval --pool examples --agent oracle --concurrency 2 --wait

echo
echo "== 2. recursive task synthesis from examples/seeds"
bin/starter synth --seeds examples/seeds --rounds 2 --per-seed 1 --pool demo-synth

echo
echo "== 3. the eight-dimension audit (contamination checked against the examples)"
bin/starter audit --pool demo-synth --keep-pool demo-train --eval-pool examples

echo
echo "== 4. the campaign: SFT, critic warm-up, PPO, evals (a few minutes on 2 cores)"
bin/starter campaign start -f examples/campaigns/demo.toml --wait
bin/starter report demo --html "$STATE/demo-report.html"

echo
echo "Temporal UI: http://localhost:${T1FLOW_UI_PORT:-8233} (the dev server keeps running; 'make stop' stops it)"
echo "Trace a rollout:   bin/starter trace <rollout id or task id>"
echo "Campaign status:   bin/starter campaign status demo"
echo "Compare checkpoints (with 'make worker' running): bin/starter eval --pool examples --checkpoint demo:sft,demo:latest --turn-cap 3 --wait"
