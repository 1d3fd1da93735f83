#!/bin/bash
# per-assertion results as CTRF JSON
mkdir -p /logs/verifier
R=()
check() { local n=$1; shift; if "$@" >/dev/null 2>&1; then R+=("{\"name\":\"$n\",\"status\":\"passed\"}"); else R+=("{\"name\":\"$n\",\"status\":\"failed\"}"); fi; }
check db_exists test -f /app/people.db
check row_count test "$(sqlite3 /app/people.db 'select count(*) from people')" = "$(($(wc -l < /app/people.csv) - 1))"
check ages test "$(sqlite3 /app/people.db 'select sum(age) from people')" = "$(awk -F, 'NR>1{s+=$2} END{print s}' /app/people.csv)"
(IFS=,; echo "{\"results\":{\"tests\":[${R[*]}]}}") > /logs/verifier/ctrf.json
