#!/bin/bash
# one reward for the whole task
mkdir -p /logs/verifier
ok=1
[ "$(cat /app/digest.txt)" = "b0a1937136c4" ] || ok=0
echo $ok > /logs/verifier/reward.txt
