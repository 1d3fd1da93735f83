#!/bin/bash
set -e
awk '{ s += $1 } END { print s }' /app/numbers.txt > /app/sum.txt
sort -n /app/numbers.txt | tail -1 > /app/max.txt
