import os


def test_numbers_present():
    assert os.path.exists("/app/numbers.txt")
