#!/bin/bash
set -e
mkdir -p /backup
tar -czf /backup/data.tar.gz -C /app data
