#!/bin/bash
set -e
cat > /app/inventory.py <<'PY'
import copy
import csv


def load(path):
    with open(path, newline="") as f:
        return [dict(r, qty=int(r["qty"]), price=float(r["price"])) for r in csv.DictReader(f)]


def in_stock(rows):
    return [r["sku"] for r in rows if r["qty"] > 0]


def value(rows):
    return round(sum(r["qty"] * r["price"] for r in rows), 2)


def restock(rows, sku, n):
    if n <= 0:
        raise ValueError("n must be positive")
    out = copy.deepcopy(rows)
    for r in out:
        if r["sku"] == sku:
            r["qty"] += n
            return out
    raise KeyError(sku)
PY
