#!/bin/bash
# per-assertion results as CTRF JSON
mkdir -p /logs/verifier
R=()
check() { local n=$1; shift; if "$@" >/dev/null 2>&1; then R+=("{\"name\":\"$n\",\"status\":\"passed\"}"); else R+=("{\"name\":\"$n\",\"status\":\"failed\"}"); fi; }
check total_file test -f /app/total.txt
check total_value test "$(cat /app/total.txt)" = "1234"
(IFS=,; echo "{\"results\":{\"tests\":[${R[*]}]}}") > /logs/verifier/ctrf.json
