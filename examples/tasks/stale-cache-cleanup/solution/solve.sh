#!/bin/bash
set -euo pipefail
find /var/cache/app -type f \( -name '*.tmp' -o -name '*.cache' \) -mtime +30 -print | sort > /root/cleanup.log
xargs -r -d '\n' rm -f < /root/cleanup.log
