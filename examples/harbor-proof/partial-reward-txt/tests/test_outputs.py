from pathlib import Path

NUMBERS = [3, 1, 4, 1, 5, 9, 2, 6]


def test_sum():
    assert int(Path("/app/sum.txt").read_text()) == sum(NUMBERS)


def test_max():
    assert int(Path("/app/max.txt").read_text()) == max(NUMBERS)


def test_sorted():
    assert [int(x) for x in Path("/app/sorted.txt").read_text().split()] == sorted(NUMBERS)
