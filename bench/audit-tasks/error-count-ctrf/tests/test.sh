#!/bin/bash
# per-assertion results as CTRF JSON
mkdir -p /logs/verifier
R=()
check() { local n=$1; shift; if "$@" >/dev/null 2>&1; then R+=("{\"name\":\"$n\",\"status\":\"passed\"}"); else R+=("{\"name\":\"$n\",\"status\":\"failed\"}"); fi; }
check count_file test -f /app/out/error_count.txt
check count_value test "$(tr -d ' \n' < /app/out/error_count.txt)" = "3"
check levels_sorted test "$(cat /app/out/levels.txt | tr '\n' ' ')" = "DEBUG ERROR INFO WARN "
(IFS=,; echo "{\"results\":{\"tests\":[${R[*]}]}}") > /logs/verifier/ctrf.json
