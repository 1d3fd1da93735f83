#!/usr/bin/env bash
# The reference trainer and inference server need PyTorch, NumPy and (for
# tests) pytest for the interpreter gpu/ uses: Debian's python3-torch (CPU)
# with libopenblas0-pthread (without it matrix products are ~15x slower).
set -euo pipefail
PY=${T1FLOW_PYTHON:-/usr/bin/python3}

ok() {
  "$PY" -c "import torch, numpy, pytest" 2>/dev/null &&
    { ! command -v dpkg >/dev/null || dpkg -s libopenblas0-pthread >/dev/null 2>&1; }
}

ok && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "$PY" = /usr/bin/python3 ]; then
  echo "ensure-python: installing Debian's python3-torch libopenblas0-pthread python3-numpy python3-pytest" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq python3-torch libopenblas0-pthread python3-numpy python3-pytest >/dev/null
  ok && exit 0
fi
echo "ensure-python: $PY cannot import torch, numpy and pytest." >&2
echo "  Debian/Ubuntu: apt-get install python3-torch libopenblas0-pthread python3-numpy python3-pytest" >&2
echo "  Elsewhere: pip install torch numpy pytest, and set T1FLOW_PYTHON to that interpreter." >&2
exit 1
