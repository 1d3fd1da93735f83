#!/bin/bash
set -e
tr ' ' '\n' < /app/text/corpus.txt | tr A-Z a-z | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2 | head -3 | awk '{print $2, $1}' > /app/text/top3.txt
