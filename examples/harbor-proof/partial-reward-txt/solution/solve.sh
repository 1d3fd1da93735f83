#!/bin/bash
# The reference solution gets two of the three files right: sorted.txt is
# in descending order, which the grader scores as wrong. Its reward is 2/3.
set -e
cd /app
python3 -c 'print(sum(int(x) for x in open("numbers.txt")))' > sum.txt
sort -n numbers.txt | tail -1 > max.txt
sort -r numbers.txt > sorted.txt
