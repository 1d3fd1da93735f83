#!/bin/bash
set -euo pipefail
cd /app/inbox
for f in IMG_*_*.jpg; do
  if [[ "$f" =~ ^IMG_([0-9]{4})([0-9]{2})[0-9]{2}_[0-9]{6}\.jpg$ ]]; then
    dir="/app/photos/${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"
    mkdir -p "$dir"
    mv "$f" "$dir/"
  fi
done
