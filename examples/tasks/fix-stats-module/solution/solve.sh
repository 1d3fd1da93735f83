#!/bin/bash
set -euo pipefail
cat > /app/stats.py <<'PY'
def median(xs):
    s = sorted(xs)
    n = len(s)
    if n % 2:
        return s[n // 2]
    return (s[n // 2 - 1] + s[n // 2]) / 2


def moving_average(xs, k):
    if k < 1 or k > len(xs):
        raise ValueError(f"window {k} does not fit a list of {len(xs)}")
    return [sum(xs[i:i + k]) / k for i in range(len(xs) - k + 1)]
PY
