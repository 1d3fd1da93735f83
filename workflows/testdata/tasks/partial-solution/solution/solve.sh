#!/bin/bash
# Deliberately incomplete: d.txt is missing and e.txt holds the wrong letter.
mkdir -p /app/out
for l in a b c; do echo $l > /app/out/$l.txt; done
echo x > /app/out/e.txt
