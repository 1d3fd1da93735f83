#!/bin/bash
# Terminal-Bench 2's test.sh (uv from astral.sh, pytest 8.4.1 with the CTRF
# plugin), but the reward is the fraction of checks right, read from pytest's
# CTRF, and not pytest's exit: Harbor reads any float in reward.txt.

apt-get update
apt-get install -y curl

curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh

source $HOME/.local/bin/env

uvx \
  -p 3.11 \
  -w pytest==8.4.1 \
  -w pytest-json-ctrf==0.3.5 \
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA

python3 - <<'PY'
import json

tests = json.load(open("/logs/verifier/ctrf.json"))["results"]["tests"]
passed = sum(t["status"] == "passed" for t in tests)
open("/logs/verifier/reward.txt", "w").write(f"{passed / len(tests):.4f}\n")
PY
