#!/bin/bash
set -e
mkdir -p /app/backup
cp /app/etc/*.conf /app/backup/
