import re
from collections import Counter
from pathlib import Path

CORPUS = Path("/app/corpus.txt")
FREQ = Path("/app/freq.txt")
TOTAL = Path("/app/total.txt")


def expected():
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", CORPUS.read_text())]
    return words, sorted(Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))


def lines():
    return FREQ.read_text().splitlines()


def test_freq_file_exists():
    assert FREQ.is_file()


def test_every_line_is_word_and_count():
    assert lines() and all(re.fullmatch(r"[a-z]+ [1-9][0-9]*", l) for l in lines())


def test_counts_are_right():
    _, exp = expected()
    got = {l.split()[0]: int(l.split()[1]) for l in lines()}
    assert got == dict(exp)


def test_sorted_by_count_then_word():
    _, exp = expected()
    assert lines() == [f"{w} {c}" for w, c in exp]


def test_total():
    words, _ = expected()
    assert TOTAL.read_text().strip() == str(len(words))
