#!/bin/bash
# Harbor runs this as verifier.user (grader), in environment.workdir; the
# agent ran as agent.user (app). One named reward per key Harbor honours, and
# "reward" for all three.
au=0
[ "$(cat /srv/work/whoami.txt 2>/dev/null)" = app ] && [ "$(stat -c %U /srv/work/whoami.txt)" = app ] && au=1
wd=0
[ "$(cat /srv/work/where.txt 2>/dev/null)" = /srv/work ] && wd=1
vu=0
[ "$(id -un)" = grader ] && [ "$(pwd)" = /srv/work ] && vu=1
r=0
[ "$au$wd$vu" = 111 ] && r=1
printf '{"reward": %d, "agent_user": %d, "workdir": %d, "verifier_user": %d}\n' "$r" "$au" "$wd" "$vu" > /logs/verifier/reward.json
echo "agent_user $au workdir $wd verifier_user $vu (verifier: $(id -un) in $(pwd))"
