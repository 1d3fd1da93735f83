#!/bin/bash
set -e
mkdir -p /app/out
awk -F, 'NR>1{t[$1]+=$2} END{for(r in t) print r, t[r]}' /app/in/sales.csv | sort > /app/out/summary.txt
awk -F, 'NR>1{t[$1]+=$2} END{printf "{"; s=""; for(r in t){printf "%s\"%s\": %d", s, r, t[r]; s=", "} print "}"}' /app/in/sales.csv > /app/out/summary.json
