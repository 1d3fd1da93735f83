import sys

import pytest

sys.path.insert(0, "/app")
import stats  # noqa: E402


def test_median_odd():
    assert stats.median([5, 1, 3]) == 3


def test_median_even():
    assert stats.median([4, 1, 3, 2]) == 2.5


def test_median_keeps_input():
    xs = [3, 1, 2]
    stats.median(xs)
    assert xs == [3, 1, 2]


def test_moving_average_windows():
    assert stats.moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]


def test_moving_average_full_window():
    assert stats.moving_average([2, 4], 2) == [3.0]


def test_moving_average_bad_k():
    with pytest.raises(ValueError):
        stats.moving_average([1, 2], 3)
    with pytest.raises(ValueError):
        stats.moving_average([1, 2], 0)
