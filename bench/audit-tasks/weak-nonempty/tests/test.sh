#!/bin/bash
# one reward for the whole task
mkdir -p /logs/verifier
ok=1
[ -s /app/DOC.txt ] || ok=0
echo $ok > /logs/verifier/reward.txt
