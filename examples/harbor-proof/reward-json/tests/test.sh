#!/bin/bash
# A grader with no test runner that writes Harbor's reward.json: the share of
# keys right, one key per check.
python3 - <<'PY'
import json

want = {"count": 4, "mean": 75.0, "passed": 3}
try:
    got = json.load(open("/app/report.json"))
except (OSError, ValueError):
    got = {}
right = sum(got.get(k) == v for k, v in want.items())
json.dump({"reward": right / len(want)}, open("/logs/verifier/reward.json", "w"))
print(f"{right}/{len(want)} keys right")
PY
