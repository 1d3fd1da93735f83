#!/bin/bash
# one reward for the whole task
mkdir -p /logs/verifier
ok=1
[ -d /srv/share ] || ok=0
[ "$(stat -c %a /srv/share)" = "2775" ] || ok=0
[ "$(cat /srv/share/README)" = "shared files live here" ] || ok=0
[ "$(stat -c %a /srv/share/README)" = "644" ] || ok=0
echo $ok > /logs/verifier/reward.txt
