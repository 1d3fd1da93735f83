#!/bin/bash
set -e
awk -F, 'NR>1{s+=$2} END{print s}' /app/ledger.csv > /app/total.txt
