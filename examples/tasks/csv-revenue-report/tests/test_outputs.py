import csv
import json
from pathlib import Path

REPORT = Path("/app/report.json")


def expected():
    by_region, by_product = {}, {}
    with open("/app/sales.csv") as f:
        for row in csv.DictReader(f):
            if not row["units"].isdigit():
                continue
            rev = int(row["units"]) * float(row["unit_price"])
            by_region[row["region"]] = by_region.get(row["region"], 0) + rev
            by_product[row["product"]] = by_product.get(row["product"], 0) + rev
    return by_region, by_product


def load():
    return json.loads(REPORT.read_text())


def test_report_exists():
    assert REPORT.is_file()


def test_report_is_json_object():
    assert isinstance(load(), dict)


def test_regions():
    by_region, _ = expected()
    got = load()["by_region"]
    assert set(got) == set(by_region)
    for k, v in by_region.items():
        assert abs(got[k] - round(v, 2)) < 0.005


def test_total_skips_malformed_rows():
    by_region, _ = expected()
    assert abs(load()["total"] - round(sum(by_region.values()), 2)) < 0.005


def test_top_product():
    _, by_product = expected()
    assert load()["top_product"] == max(by_product, key=by_product.get)
