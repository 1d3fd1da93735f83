#!/bin/bash
# per-assertion results as JUnit XML, written by hand
mkdir -p /logs/verifier
X=""; F=0; N=0
check() { local n=$1; shift; N=$((N+1)); if "$@" >/dev/null 2>&1; then X+="<testcase name=\"$n\"/>"; else F=$((F+1)); X+="<testcase name=\"$n\"><failure message=\"failed\"/></testcase>"; fi; }
check workers grep -qx "workers = 8" /app/conf/server.conf
check log_level grep -qx "log_level = info" /app/conf/server.conf
check others_kept grep -qx "timeout = 30" /app/conf/server.conf
check line_count test "$(wc -l < /app/conf/server.conf)" -eq 4
echo "<testsuite name=\"t\" tests=\"$N\" failures=\"$F\">$X</testsuite>" > /logs/verifier/junit.xml
