#!/bin/bash
set -e
a=$(grep '^apples=' /app/inventory.txt | cut -d= -f2)
p=$(grep '^pears=' /app/inventory.txt | cut -d= -f2)
echo $((a + p)) > /app/fruit_total.txt
