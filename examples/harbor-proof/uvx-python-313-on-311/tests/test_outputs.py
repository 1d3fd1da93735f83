# The image is python:3.11-slim, but test.sh asks uv for Python 3.13
# (`uvx -p 3.13`), which Harbor's uv downloads: these tests are 3.13 (a PEP 696
# type parameter default is a syntax error before 3.13; copy.replace is new in
# 3.13's standard library), whatever Python the image has.
import copy
import dataclasses
import json
import sys


@dataclasses.dataclass(frozen=True)
class Total:
    name: str
    total: int


def rows[T = Total](cls: type[T] = Total) -> list[T]:
    with open("/app/totals.json") as f:
        return [cls(**r) for r in json.load(f)]


def test_runs_on_the_python_test_sh_asks_for():
    assert sys.version_info[:2] >= (3, 13)


def test_totals_is_a_list_of_objects():
    with open("/app/totals.json") as f:
        data = json.load(f)
    assert isinstance(data, list) and all(set(r) == {"name", "total"} for r in data)


def test_totals():
    got = rows()
    assert got == [Total("alice", 15), Total("bob", 3), Total("carol", 5)]
    assert copy.replace(got[0], total=0) == Total("alice", 0)
