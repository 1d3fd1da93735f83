#!/bin/bash
set -e
python3 - <<'PY'
import csv
import json

rows = list(csv.DictReader(open("/app/scores.csv")))
scores = [int(r["score"]) for r in rows]
json.dump({"count": len(scores), "mean": round(sum(scores) / len(scores), 2),
           "passed": sum(s >= 60 for s in scores)}, open("/app/report.json", "w"))
PY
