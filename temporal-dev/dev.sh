#!/usr/bin/env bash
# The local Temporal dev server: the pinned CLI built once into the project's
# state directory, a SQLite file that survives restarts, the UI on :8233 and
# t1flow's search attributes. Usage: dev.sh install|start|stop|status|path
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${T1FLOW_HOME:-$ROOT/.t1flow}
VERSION=v1.5.1
BIN=${T1FLOW_TEMPORAL_BIN:-$STATE/bin/temporal}
PORT=${T1FLOW_TEMPORAL_PORT:-7233}
UI_PORT=${T1FLOW_UI_PORT:-8233}
DIR=$STATE/temporal
DB=${T1FLOW_TEMPORAL_DB:-$DIR/dev.sqlite}
PIDFILE=$DIR/dev.pid
LOG=$DIR/dev.log
ADDR=127.0.0.1:$PORT

# Keep in step with internal/ids.SearchAttributeFlags.
SEARCH_ATTRIBUTES=(CampaignID=Keyword Stage=Keyword TaskID=Keyword RolloutID=Keyword
  Outcome=Keyword Step=Int Attempt=Int Reward=Double)

install() {
  # go install stamps no version into the binary, so a file beside it records it.
  if [ -x "$BIN" ] && [ "$(cat "$BIN.version" 2>/dev/null)" = "$VERSION" ]; then
    return
  fi
  command -v go >/dev/null || { echo "temporal-dev: Go is needed to build the Temporal CLI $VERSION" >&2; exit 1; }
  echo "temporal-dev: building the Temporal CLI $VERSION into $(dirname "$BIN") (about 3 minutes, once)" >&2
  mkdir -p "$(dirname "$BIN")"
  GOBIN=$(dirname "$BIN") go install "github.com/temporalio/cli/cmd/temporal@$VERSION"
  echo "$VERSION" >"$BIN.version"
}

healthy() {
  "$BIN" operator cluster health --address "$ADDR" >/dev/null 2>&1
}

start() {
  install
  if healthy; then
    echo "temporal-dev: reusing the server on $ADDR (UI http://localhost:$UI_PORT)" >&2
    return
  fi
  mkdir -p "$DIR"
  local args=(server start-dev --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT"
    --db-filename "$DB" --log-level warn
    --dynamic-config-value system.enableActivityEagerExecution=true)
  for sa in "${SEARCH_ATTRIBUTES[@]}"; do args+=(--search-attribute "$sa"); done
  nohup "$BIN" "${args[@]}" >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 120); do
    if healthy; then
      echo "temporal-dev: started on $ADDR, UI http://localhost:$UI_PORT, state $DB, log $LOG" >&2
      return
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "temporal-dev: the server exited; last lines of $LOG:" >&2
      tail -n 20 "$LOG" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "temporal-dev: no answer on $ADDR after 60s; see $LOG" >&2
  exit 1
}

stop() {
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    local pid
    pid=$(cat "$PIDFILE")
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    echo "temporal-dev: stopped" >&2
  else
    echo "temporal-dev: not running (from this state directory)" >&2
  fi
  rm -f "$PIDFILE"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) if healthy; then echo "running on $ADDR"; else echo "not running"; exit 1; fi ;;
  path) install; echo "$BIN" ;;
  *) echo "usage: $0 install|start|stop|status|path" >&2; exit 2 ;;
esac
