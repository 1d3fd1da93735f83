#!/bin/bash
set -e
mkdir -p /app/out
awk '$2 == "ERROR"' /app/logs/app.log | wc -l > /app/out/error_count.txt
awk '{print $2}' /app/logs/app.log | sort -u > /app/out/levels.txt
