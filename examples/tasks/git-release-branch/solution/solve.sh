#!/bin/bash
set -euo pipefail
cd /app/repo
git checkout -q -b release main
git rm -q secrets.env
echo "secrets.env" >> .gitignore
git add .gitignore
git commit -qm "remove secrets.env from the release"
git tag -a v1.0 -m "first release"
