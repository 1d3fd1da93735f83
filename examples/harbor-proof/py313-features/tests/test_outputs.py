# These tests are Python 3.13: a type parameter with a default (PEP 696) is
# a syntax error before 3.13, and copy.replace and warnings.deprecated are
# new in 3.13's standard library.
import copy
import importlib.util
import sys
import warnings

import pytest


def load():
    spec = importlib.util.spec_from_file_location("geometry", "/app/geometry.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def first[T = float](xs: list[T]) -> T:
    return xs[0]


def test_runs_on_python_313():
    assert sys.version_info[:2] >= (3, 13)


def test_point_is_frozen():
    g = load()
    p = g.Point(1.0, 2.0)
    with pytest.raises(AttributeError):
        p.x = 3.0


def test_moved_is_a_copy():
    g = load()
    p = g.Point(1.0, 2.0)
    q = g.moved(p, 2.0, -1.0)
    assert (q.x, q.y) == (3.0, 1.0) and (p.x, p.y) == (1.0, 2.0)
    assert copy.replace(q, y=9.0) == g.Point(3.0, 9.0)


def test_old_distance_is_deprecated():
    g = load()
    a, b = g.Point(0.0, 0.0), g.Point(3.0, 4.0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert first([g.old_distance(a, b)]) == 5.0
    assert [str(x.message) for x in w] == ["use distance"]
    assert g.old_distance.__deprecated__ == "use distance"


def test_distance_has_no_warning():
    g = load()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert g.distance(g.Point(1.0, 1.0), g.Point(4.0, 5.0)) == 5.0
