#!/bin/bash
# one reward for the whole task
mkdir -p /logs/verifier
ok=1
[ -z "$(find /app/cache -name '*.tmp')" ] || ok=0
[ -f /app/cache/keep.dat ] && [ -f /app/cache/a/notes.txt ] || ok=0
[ "$(cat /app/cache/deleted.txt)" = "3" ] || ok=0
echo "{\"reward\": $ok}" > /logs/verifier/reward.json
