import sys

sys.path.insert(0, "/app")
import temps  # noqa: E402


def test_boiling():
    assert temps.to_fahrenheit(100) == 212


def test_freezing():
    assert temps.to_fahrenheit(0) == 32


def test_body():
    assert abs(temps.to_fahrenheit(37) - 98.6) < 1e-9
