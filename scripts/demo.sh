#!/usr/bin/env bash
# make demo: a small campaign on the local defaults. A worker with every role
# runs in the background (Docker sandboxes, the reference trainer and
# inference server); the example tasks are imported and checked with the
# oracle; tasks are synthesized from examples/seeds and audited; then the
# campaign in examples/campaigns/learn.toml trains the policy on the
# write-hello family (docs/learning.md): SFT, critic warm-up, PPO steps and
# evals of the base, SFT and final checkpoints on held-out variants.
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

# start_worker starts a worker with every role in the background and waits
# for its trainer and inference server.
# Only what this start wrote counts: the log is appended to and the URL file
# outlives a worker, so a reused T1FLOW_HOME holds an earlier worker's lines.
start_worker() {
  local from marker="$STATE/.worker-start"
  from=$(( $(stat -c %s "$LOG" 2>/dev/null || echo 0) + 1 ))
  touch "$marker"
  bin/worker -role all -log-level warn >>"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  echo "demo: worker started (pid $!, log $LOG); waiting for the trainer and inference server" >&2
  for _ in $(seq 1 120); do
    [ -s "$STATE/inference.url" ] && ! [ "$marker" -nt "$STATE/inference.url" ] &&
      tail -c +"$from" "$LOG" | grep -q "trainer .* on http" && return 0
    kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { echo "demo: the worker exited; see $LOG" >&2; tail -n 20 "$LOG" >&2; exit 1; }
    sleep 1
  done
}

if [ "${1:-}" = stop-worker ]; then
  stop_worker
  exit 0
fi
# start-worker: only the worker, left running (scripts/async-compare.sh).
if [ "${1:-}" = start-worker ]; then
  start_worker
  exit 0
fi

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "demo: reusing the worker (pid $(cat "$PIDFILE"))" >&2
else
  trap stop_worker EXIT
  start_worker
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
echo "== 4. the write-hello family: SFT, training, warm-up and held-out pools (docs/learning.md)"
rm -rf "$STATE/learn"
go run ./examples/learn -out "$STATE/learn" -sft 32 -train 32 -heldout 16
bin/starter tasks import "$STATE/learn/sft" --pool hello-sft
bin/starter tasks import "$STATE/learn/train" --pool hello-train
bin/starter tasks import $(ls -d "$STATE"/learn/train/* | head -n 8) --pool hello-warmup
bin/starter tasks import "$STATE/learn/heldout" --pool hello-heldout

echo
echo "== 5. the campaign: SFT, critic warm-up, PPO, evals on held-out variants (about 12 minutes on 2 cores)"
start=$(date +%s)
if ! bin/starter campaign start -f examples/campaigns/learn.toml --wait; then
  echo "demo: the campaign did not finish (above). A paused campaign waits for a decision: bin/starter campaign status learn, then retry, skip or cancel (docs/campaigns.md, \"When a stage fails\")"
  exit 1
fi
echo "campaign wall time: $(( $(date +%s) - start ))s"
bin/starter report learn --html "$STATE/learn-report.html"
echo "report: $STATE/learn-report.html (bin/starter report learn --json for the numbers)"
echo "the learning bars (docs/learning.md; one run can miss the PPO curve by chance):"
bin/starter report learn --bars || echo "demo: the campaign finished but missed a learning bar (above)"

echo
echo "Temporal UI: http://localhost:${T1FLOW_UI_PORT:-8233} (the dev server keeps running; 'make stop' stops it)"
echo "Trace a rollout:   bin/starter trace <rollout id or task id>"
echo "Campaign status:   bin/starter campaign status learn"
echo "Compare checkpoints (with 'make worker' running): bin/starter eval --pool hello-heldout --checkpoint learn:sft,learn:latest --turn-cap 2 --wait"
