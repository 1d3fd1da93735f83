from pathlib import Path


def expected():
    return sum(1 for line in Path("/app/service.log").read_text().splitlines() if "ERROR" in line)


def test_count_written():
    assert Path("/app/error_count.txt").exists()


def test_count_is_right():
    assert int(Path("/app/error_count.txt").read_text().strip()) == expected()
