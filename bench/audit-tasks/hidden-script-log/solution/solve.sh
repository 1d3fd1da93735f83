#!/bin/bash
set -e
cat > /app/dedupe.sh <<'SH'
#!/bin/bash
awk '!seen[$0]++' "$1"
echo "$(date +%s) $1" >> /app/state/runs.log
SH
chmod +x /app/dedupe.sh
mkdir -p /app/state
