#!/bin/bash
# A grader that scores each file on its own and writes the fraction right as
# reward.txt (Harbor reads any float there); pytest's CTRF gives the
# per-check results beside it.
cd /tests
python3 -m pytest --ctrf /logs/verifier/ctrf.json test_outputs.py -rA
python3 - <<'PY'
import json

tests = json.load(open("/logs/verifier/ctrf.json"))["results"]["tests"]
passed = sum(t["status"] == "passed" for t in tests)
open("/logs/verifier/reward.txt", "w").write(f"{passed / len(tests):.4f}\n")
PY
