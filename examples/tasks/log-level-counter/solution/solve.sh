#!/bin/bash
cat > /app/levels.sh <<'SH'
#!/bin/bash
[ -f "$1" ] || exit 2
grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8} [A-Z]+ ' "$1" | awk '{print $2}' | sort | uniq -c \
  | awk '{print $2, $1}' | sort -k2,2nr -k1,1
SH
chmod +x /app/levels.sh
