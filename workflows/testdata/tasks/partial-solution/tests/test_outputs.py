from pathlib import Path


def check(letter):
    assert (Path("/app/out") / f"{letter}.txt").read_text().strip() == letter


def test_a():
    check("a")


def test_b():
    check("b")


def test_c():
    check("c")


def test_d():
    check("d")


def test_e():
    check("e")
