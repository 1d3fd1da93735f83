#!/bin/bash
set -e
cat > /app/total.sh <<'SH'
#!/bin/bash
awk -F, 'NR > 1 { t += $2 * $3 } END { printf "%.2f\n", t }' "$1"
SH
chmod +x /app/total.sh
