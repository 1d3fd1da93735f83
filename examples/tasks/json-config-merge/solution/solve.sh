#!/bin/bash
set -euo pipefail
cat > /app/merge.py <<'PY'
import json
import sys


def merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = merge(out[k], v)
            else:
                out[k] = v
        return out
    if isinstance(base, list) and isinstance(over, list):
        return base + [x for x in over if x not in base]
    return over


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        sys.exit(1)


if len(sys.argv) != 3:
    print("usage: merge.py BASE OVERRIDE", file=sys.stderr)
    sys.exit(1)
print(json.dumps(merge(load(sys.argv[1]), load(sys.argv[2])), indent=2, sort_keys=True))
PY
