#!/usr/bin/env bash
# Make sure this machine can host sandboxes: debootstrap (to build the base
# image offline) and a Docker daemon that answers. Use what is there; on Debian
# as root, install what is missing (docker.io, debootstrap) and start dockerd in
# the background; otherwise say what to install.
set -euo pipefail
STATE=${T1FLOW_HOME:-$(cd "$(dirname "$0")/.." && pwd)/.t1flow}

answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

pkgs=()
# A daemon that answers (local or DOCKER_HOST) needs no docker.io package.
command -v dockerd >/dev/null || answers || pkgs+=(docker.io)
command -v debootstrap >/dev/null || pkgs+=(debootstrap)
if [ ${#pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-sandbox-host: installing Debian's ${pkgs[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${pkgs[@]}" >/dev/null
  else
    echo "ensure-sandbox-host: missing ${pkgs[*]}. Install them (Debian/Ubuntu: apt-get install ${pkgs[*]});" >&2
    echo "  debootstrap builds the sandbox base image offline; Docker runs the sandboxes (or set DOCKER_HOST)." >&2
    exit 1
  fi
fi

if command -v docker >/dev/null && answers; then
  exit 0
fi

if ! command -v dockerd >/dev/null; then
  echo "ensure-sandbox-host: no Docker daemon answers and dockerd is not installed." >&2
  echo "  Install Docker (Debian/Ubuntu: apt-get install docker.io) and start it, or set DOCKER_HOST." >&2
  exit 1
fi

if [ "$(id -u)" != 0 ]; then
  echo "ensure-sandbox-host: dockerd is installed but not answering; start it (sudo systemctl start docker) or add yourself to the docker group." >&2
  exit 1
fi

mkdir -p "$STATE"
echo "ensure-sandbox-host: starting dockerd (log $STATE/dockerd.log)" >&2
# Its own session: a daemon, not a child that dies with the shell (or the
# process group) that happened to start it.
setsid nohup dockerd >>"$STATE/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  answers && exit 0
  sleep 0.5
done
echo "ensure-sandbox-host: dockerd did not answer within 30s; last lines of $STATE/dockerd.log:" >&2
tail -n 20 "$STATE/dockerd.log" >&2
exit 1
