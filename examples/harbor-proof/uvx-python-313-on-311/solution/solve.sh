#!/bin/bash
set -e
cd /app
python3 - <<'PY'
import csv
import json

totals = {}
with open("sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["name"]] = totals.get(row["name"], 0) + int(row["amount"])
with open("totals.json", "w") as f:
    json.dump([{"name": n, "total": t} for n, t in sorted(totals.items())], f)
PY
