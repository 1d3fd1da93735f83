#!/bin/bash
set -e
awk '{ s += $1; n++ } END { printf "%.1f\n", s / n }' /app/vals.txt > /app/avg.txt
