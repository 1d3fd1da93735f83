#!/bin/bash
set -e
cd /app/service
git revert --no-edit HEAD
