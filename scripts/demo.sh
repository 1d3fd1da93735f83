#!/usr/bin/env bash
# make demo: a worker in the background, the example tasks imported into a
# pool, and an oracle eval sweep over them, with the table and UI links.
# Expects the dev server and the base image (the Makefile sees to both).
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

started=0
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "demo: reusing the worker (pid $(cat "$PIDFILE"))" >&2
else
  bin/worker -role control,sandbox -log-level warn >>"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  started=1
  echo "demo: worker started (pid $!, log $LOG)" >&2
fi
[ $started = 1 ] && trap stop_worker EXIT

bin/starter tasks import examples/tasks --pool examples
bin/starter tasks list --pool examples
echo
bin/starter eval --pool examples --agent oracle --concurrency 2 --wait
echo
echo "Temporal UI: http://localhost:${T1FLOW_UI_PORT:-8233} (the dev server keeps running; 'make stop' stops it)"
echo "Find one task's rollouts in the UI with the query: TaskID = \"<id from the list above>\""
