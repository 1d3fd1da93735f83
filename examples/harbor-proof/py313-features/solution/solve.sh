#!/bin/bash
set -e
cat > /app/geometry.py <<'PY'
import copy
import dataclasses
import math
import warnings


@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    y: float


def moved(p, dx, dy):
    return copy.replace(p, x=p.x + dx, y=p.y + dy)


def distance(a, b):
    return math.hypot(a.x - b.x, a.y - b.y)


@warnings.deprecated("use distance")
def old_distance(a, b):
    return distance(a, b)
PY
python3 -c 'import sys; sys.path.insert(0, "/app"); import geometry; print(geometry.moved(geometry.Point(1, 2), 1, 1))'
