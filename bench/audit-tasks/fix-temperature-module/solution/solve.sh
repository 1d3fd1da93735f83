#!/bin/bash
set -e
sed -i 's|c \* 5 / 9 + 32|c * 9 / 5 + 32|' /app/temps.py
