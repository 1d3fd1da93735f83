#!/bin/bash
set -e
awk '$3 == 404' /app/access.log | wc -l > /app/result.txt
