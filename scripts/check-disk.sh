#!/usr/bin/env bash
# Say early, naming the path, when the disk under T1FLOW_HOME is too full for
# what `make test` / `make demo` build there (the hf venv ~6 GB, the quota
# daemon's loop file, images, the verifier toolchain, checkpoints): a build
# that runs out of space half way fails far from its cause ("no space left on
# device" inside a toolchain export). Below T1FLOW_MIN_FREE_GB (default 2) it
# stops; below T1FLOW_WARN_FREE_GB (default 15) it warns and goes on.
set -euo pipefail
STATE=${T1FLOW_HOME:-$(cd "$(dirname "$0")/.." && pwd)/.t1flow}
min=${T1FLOW_MIN_FREE_GB:-2}
warn=${T1FLOW_WARN_FREE_GB:-15}
dir=$STATE
while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
for d in "$dir" "${TMPDIR:-/tmp}"; do
  free=$(df -Pk "$d" | awk 'NR==2 {print int($4 / 1048576)}')
  if [ "$free" -lt "$min" ]; then
    echo "check-disk: only ${free} GB free at $d (filesystem of $(df -P "$d" | awk 'NR==2 {print $6}')); t1flow needs at least ${min} GB there and about ${warn} GB for make test." >&2
    echo "  Free space (old campaigns' checkpoints under <home>/gpu/checkpoints and <home>/store/checkpoints are the usual cause) or set T1FLOW_HOME elsewhere; T1FLOW_MIN_FREE_GB=0 skips this check." >&2
    exit 1
  fi
  if [ "$free" -lt "$warn" ]; then
    echo "check-disk: WARNING: ${free} GB free at $d; make test builds about ${warn} GB (hf venv, images, quota daemon loop file)." >&2
  fi
done
