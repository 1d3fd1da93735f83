#!/bin/bash
# per-assertion results as CTRF JSON
mkdir -p /logs/verifier
R=()
check() { local n=$1; shift; if "$@" >/dev/null 2>&1; then R+=("{\"name\":\"$n\",\"status\":\"passed\"}"); else R+=("{\"name\":\"$n\",\"status\":\"failed\"}"); fi; }
check archive test -f /backup/data.tar.gz
check members bash -c 'tar -tzf /backup/data.tar.gz | grep -qx "data/sub/b.txt"'
check content bash -c 'test "$(tar -xzOf /backup/data.tar.gz data/a.txt)" = "$(cat /app/data/a.txt)"'
(IFS=,; echo "{\"results\":{\"tests\":[${R[*]}]}}") > /logs/verifier/ctrf.json
