#!/bin/bash
set -e
echo 542 > /app/sevens.txt
