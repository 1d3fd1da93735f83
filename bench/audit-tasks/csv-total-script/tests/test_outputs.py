import csv
import subprocess
import tempfile

SAMPLE = "/app/data/sample.csv"


def expected(path):
    with open(path) as f:
        return "%.2f" % sum(int(r["qty"]) * float(r["price"]) for r in csv.DictReader(f))


def total(path):
    return subprocess.run(["bash", "/app/total.sh", path], capture_output=True, text=True).stdout.strip()


def test_sample_total():
    assert total(SAMPLE) == expected(SAMPLE)


def test_other_file():
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write("item,qty,price\nx,10,0.25\ny,1,99.99\n")
    assert total(f.name) == expected(f.name)
