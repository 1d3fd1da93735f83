#!/usr/bin/env bash
# Harbor's Python environment: a venv at $T1FLOW_HOME/harborenv (default
# .t1flow/harborenv) with harbor pinned with hashes (harness/harbor/
# requirements.txt). The harness reads Terminus-2's prompt template and
# messages from this install (harness/harbor/spec.py) and the differential
# tests run Harbor's own parser and tmux logic in it (docs/harness.md); every
# consumer finds the interpreter through T1FLOW_HARBOR_PYTHON (default
# $ENV/bin/python).
#
# Harbor needs Python >= 3.12. The base interpreter is, in order:
# T1FLOW_HARBOR_BASE_PYTHON, python3.13 / python3.12 on PATH, pyenv's 3.12+
# versions.
# Idempotent: a stamp holding the requirements' hash makes a second run instant.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOME_DIR=${T1FLOW_HOME:-$ROOT/.t1flow}
ENV=${T1FLOW_HARBORENV:-$HOME_DIR/harborenv}
REQ=$ROOT/harness/harbor/requirements.txt
REQ_UV=$ROOT/gpu/hf/requirements-uv.txt
STAMP=$ENV/.t1flow-requirements.sha256
say() { echo "ensure-harbor-env: $*" >&2; }

SPEC_PY=$ROOT/harness/harbor/spec.py
# spec.py's output, named by its hash as harness/harbor.SpecFile names it.
SPEC_JSON=$ENV/t1flow-harbor-spec-$(sha256sum "$SPEC_PY" | cut -c1-16).json
write_spec() {
  LITELLM_LOCAL_MODEL_COST_MAP=True "$ENV/bin/python" "$SPEC_PY" > "$SPEC_JSON.tmp" && mv "$SPEC_JSON.tmp" "$SPEC_JSON"
}

want=$(cat "$REQ" "$REQ_UV" | sha256sum | cut -d' ' -f1)
if [ -x "$ENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  [ -s "$SPEC_JSON" ] || { say "writing $SPEC_JSON (Terminus-2's texts read from harbor)"; write_spec; }
  exit 0
fi

# A Python >= 3.12 on this host, or none.
host_python() {
  local c
  for c in "${T1FLOW_HARBOR_BASE_PYTHON:-}" "$(command -v python3.13 || true)" "$(command -v python3.12 || true)" \
    $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do
    [ -n "$c" ] && [ -x "$c" ] || continue
    # pyenv shims exist without a selected version: ask the interpreter itself.
    if "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      "$c" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  return 1
}

start=$(date +%s)
rm -f "$STAMP"
if base=$(host_python); then
  say "building $ENV from $base ($("$base" --version 2>&1)), harbor pinned with hashes in harness/harbor/requirements.txt"
  if [ ! -x "$ENV/bin/python" ] || ! "$ENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
    rm -rf "$(readlink -m "$ENV")"
    "$base" -m venv "$(readlink -m "$ENV")" || { say "'$base -m venv' failed"; exit 1; }
  fi
  # uv (pinned with hashes, the hf env's pin) resolves nothing: it installs the compiled, hashed set.
  "$ENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r "$REQ_UV"
  UV_CACHE_DIR=${UV_CACHE_DIR:-$HOME_DIR/cache/uv} \
    "$ENV/bin/uv" pip sync -q --require-hashes --python "$ENV/bin/python" "$REQ"
else
  # Not built yet: a venv inside an image from the Debian trixie base
  # (Python 3.13) for hosts without one (docs/harness.md).
  say "no Python >= 3.12 on this host: set T1FLOW_HARBOR_BASE_PYTHON to one (python3.12/3.13; pyenv install 3.12)"
  exit 1
fi
rm -f "$ENV"/t1flow-harbor-spec-*.json
write_spec || { say "$ENV: harness/harbor/spec.py failed (is harbor.agents.terminus_2 importable?)"; exit 1; }
echo "$want" > "$STAMP"
say "$ENV ready in $(( $(date +%s) - start )) s: harbor $("$ENV/bin/python" -c 'import importlib.metadata as m; print(m.version("harbor"))')"
