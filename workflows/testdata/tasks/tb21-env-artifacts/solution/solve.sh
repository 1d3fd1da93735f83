#!/bin/bash
set -eu
mkdir -p "$REPORT_DIR"
echo "$REPORT_TITLE: $REPORT_BODY" > "$REPORT_DIR/report.txt"
echo done > /app/summary.txt
