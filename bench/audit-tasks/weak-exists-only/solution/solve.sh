#!/bin/bash
set -e
sort /app/names.txt > /app/sorted_names.txt
