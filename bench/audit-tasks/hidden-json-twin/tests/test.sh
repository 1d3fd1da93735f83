#!/bin/bash
# per-assertion results as CTRF JSON
mkdir -p /logs/verifier
R=()
check() { local n=$1; shift; if "$@" >/dev/null 2>&1; then R+=("{\"name\":\"$n\",\"status\":\"passed\"}"); else R+=("{\"name\":\"$n\",\"status\":\"failed\"}"); fi; }
check summary_lines test "$(cat /app/out/summary.txt | tr '\n' ';')" = "east 17;north 1;west 5;"
check summary_json python3 -c 'import json,sys; d=json.load(open("/app/out/summary.json")); sys.exit(d != {"east": 17, "west": 5, "north": 1})'
(IFS=,; echo "{\"results\":{\"tests\":[${R[*]}]}}") > /logs/verifier/ctrf.json
