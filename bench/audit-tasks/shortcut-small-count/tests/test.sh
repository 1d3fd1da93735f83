#!/bin/bash
# one reward for the whole task
mkdir -p /logs/verifier
ok=1
[ "$(cat /app/bash_users.txt)" = "3" ] || ok=0
echo "{\"reward\": $ok}" > /logs/verifier/reward.json
