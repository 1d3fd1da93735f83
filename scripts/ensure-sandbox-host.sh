#!/usr/bin/env bash
# Make sure this machine can host sandboxes: debootstrap (to build the base
# image offline) and a Docker daemon that answers: as root, the quota daemon
# of scripts/ensure-xfs-docker.sh (storage_mb enforced by the kernel), else
# the main one. Use what is there; on Debian as root, install what is missing
# (docker.io, debootstrap) and start dockerd in the background; otherwise say
# what to install.
set -euo pipefail
STATE=${T1FLOW_HOME:-$(cd "$(dirname "$0")/.." && pwd)/.t1flow}

answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

pkgs=()
# A daemon that answers (local or DOCKER_HOST) needs no docker.io package.
command -v dockerd >/dev/null || answers || pkgs+=(docker.io)
command -v debootstrap >/dev/null || pkgs+=(debootstrap)
# The reward-hack tests (sandbox/reward_hacks_integration_test.go) build the
# shared objects an agent would plant.
command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)
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

# storage_mb enforced by the kernel: sandboxes run on a second dockerd whose
# data root is a loop filesystem with quotas (scripts/ensure-xfs-docker.sh;
# t1flow picks its socket when it answers, sandbox.NewClient). The main daemon
# is never reconfigured. Where it cannot start (not root, no XFS quotas nor
# btrfs in the kernel), sandboxes use the main daemon and storage_mb is only
# watched: said here and in the worker's log. T1FLOW_QUOTA_DOCKER=0 skips it.
if [ "${T1FLOW_QUOTA_DOCKER:-1}" != 0 ] && [ -z "${DOCKER_HOST:-}" ]; then
  if [ "$(id -u)" = 0 ] && "$(dirname "$0")/ensure-xfs-docker.sh" start; then
    exit 0
  fi
  echo "ensure-sandbox-host: WARNING: no quota daemon (scripts/ensure-xfs-docker.sh failed or needs root):" >&2
  echo "  sandboxes use the main daemon and storage_mb is only WATCHED there, not enforced by the kernel" >&2
  echo "  (docs/verification.md, \"storage_mb\")." >&2
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
