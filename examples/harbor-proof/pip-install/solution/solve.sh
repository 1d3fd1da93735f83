#!/bin/bash
set -e
cd /app
python - <<'PY'
import units

with open("/app/readings.txt") as f, open("/app/metres.txt", "w") as out:
    for line in f:
        value, unit = line.split()
        out.write(f"{units.to_metres(value, unit):.3f}\n")
PY
pip show units | sed -n 's/^Version: //p' > /app/units-version.txt
