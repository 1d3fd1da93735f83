#!/bin/bash
set -e
cd /app/proj
git checkout -q -b feature/docs main
mkdir -p docs && echo '# Docs' > docs/INDEX.md
git add docs && git commit -qm 'add docs index'
