#!/bin/bash
set -e
n=$(find /app/cache -name '*.tmp' -type f | wc -l)
find /app/cache -name '*.tmp' -type f -delete
echo $n > /app/cache/deleted.txt
