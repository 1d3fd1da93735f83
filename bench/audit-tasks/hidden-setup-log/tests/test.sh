#!/bin/bash
# one reward for the whole task
mkdir -p /logs/verifier
ok=1
[ "$(cat /srv/www/index.html)" = "<h1>ok</h1>" ] || ok=0
[ "$(stat -c %a /srv/www/index.html)" = "644" ] || ok=0
grep -q "site created" /var/log/site/setup.log || ok=0
echo $ok > /logs/verifier/reward.txt
