#!/bin/bash
python3 - <<'PY'
import csv
rows = list(csv.DictReader(open("/app/prices.csv")))
open("/app/top_item.txt", "w").write(max(rows, key=lambda r: float(r["price"]))["item"] + "\n")
PY
