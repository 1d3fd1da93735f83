#!/bin/bash
set -e
awk '{ s += $1 } END { print s }' /app/numbers.txt > /app/sum.txt
mkdir -p /app/reports && wc -l < /app/numbers.txt > /app/reports/count.txt
