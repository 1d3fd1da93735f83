from pathlib import Path

EXPECTED = [3.658, 3500.0, 2.5, 0.178, 1609.344]


def test_metres_file_exists():
    assert Path("/app/metres.txt").is_file()


def test_one_line_per_reading():
    assert len(Path("/app/metres.txt").read_text().split()) == len(EXPECTED)


def test_values_in_metres():
    got = [float(x) for x in Path("/app/metres.txt").read_text().split()]
    assert got == EXPECTED


def test_installed_version():
    assert Path("/app/units-version.txt").read_text().strip() == "1.0"
