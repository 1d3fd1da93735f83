#!/usr/bin/env bash
# Make sure a Docker daemon answers: use one that does; on Debian as root with
# none, install Debian's docker.io and start dockerd in the background;
# otherwise say what to install.
set -euo pipefail
STATE=${T1FLOW_HOME:-$(cd "$(dirname "$0")/.." && pwd)/.t1flow}

answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if command -v docker >/dev/null && answers; then
  exit 0
fi

if ! command -v dockerd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-docker: installing Debian's docker.io" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq docker.io >/dev/null
  else
    echo "ensure-docker: no Docker daemon answers and dockerd is not installed." >&2
    echo "  Install Docker (Debian/Ubuntu: apt-get install docker.io) and start it, or set DOCKER_HOST." >&2
    exit 1
  fi
fi

if [ "$(id -u)" != 0 ]; then
  echo "ensure-docker: dockerd is installed but not answering; start it (sudo systemctl start docker) or add yourself to the docker group." >&2
  exit 1
fi

mkdir -p "$STATE"
echo "ensure-docker: starting dockerd (log $STATE/dockerd.log)" >&2
nohup dockerd >>"$STATE/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  answers && exit 0
  sleep 0.5
done
echo "ensure-docker: dockerd did not answer within 30s; last lines of $STATE/dockerd.log:" >&2
tail -n 20 "$STATE/dockerd.log" >&2
exit 1
