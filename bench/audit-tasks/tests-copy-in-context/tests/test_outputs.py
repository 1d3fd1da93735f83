import csv
from pathlib import Path


def test_top_item_is_the_most_expensive():
    rows = list(csv.DictReader(open("/app/prices.csv")))
    want = max(rows, key=lambda r: float(r["price"]))["item"]
    assert Path("/app/top_item.txt").read_text().strip() == want, "the most expensive item is named in /app/top_item.txt"
