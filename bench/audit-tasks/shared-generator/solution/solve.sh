#!/bin/bash
awk '{ s += $1 } END { print s }' /app/data.txt > /app/sum.txt
