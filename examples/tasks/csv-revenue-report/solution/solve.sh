#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import csv, json
from collections import defaultdict
by_region, by_product = defaultdict(float), defaultdict(float)
with open("/app/sales.csv") as f:
    for row in csv.DictReader(f):
        if not row["units"].isdigit():
            continue
        revenue = int(row["units"]) * float(row["unit_price"])
        by_region[row["region"]] += revenue
        by_product[row["product"]] += revenue
report = {
    "by_region": {k: round(v, 2) for k, v in sorted(by_region.items())},
    "total": round(sum(by_region.values()), 2),
    "top_product": max(by_product, key=by_product.get),
}
with open("/app/report.json", "w") as f:
    json.dump(report, f, indent=2)
PY
