#!/bin/bash
# per-assertion results as JUnit XML, written by hand
mkdir -p /logs/verifier
X=""; F=0; N=0
check() { local n=$1; shift; N=$((N+1)); if "$@" >/dev/null 2>&1; then X+="<testcase name=\"$n\"/>"; else F=$((F+1)); X+="<testcase name=\"$n\"><failure message=\"failed\"/></testcase>"; fi; }
check has_three test "$(wc -l < /app/text/top3.txt)" -eq 3
check first_word test "$(sed -n 1p /app/text/top3.txt)" = "the 4"
check second_word test "$(sed -n 2p /app/text/top3.txt)" = "and 3"
echo "<testsuite name=\"t\" tests=\"$N\" failures=\"$F\">$X</testsuite>" > /logs/verifier/junit.xml
