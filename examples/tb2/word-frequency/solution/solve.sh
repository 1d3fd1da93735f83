#!/bin/bash
set -e
cd /app
grep -oE '[A-Za-z]+' corpus.txt | tr 'A-Z' 'a-z' > /tmp/words
sort /tmp/words | uniq -c | awk '{print $2, $1}' | sort -k2,2nr -k1,1 > freq.txt
wc -l < /tmp/words | tr -d ' ' > total.txt
