#!/bin/bash
set -e
grep -c '^ERROR' /app/app.log > /app/error_count.txt
