#!/usr/bin/env bash
# Docker Compose v5 as a Docker CLI plugin, for Harbor's own Docker
# environment (harbor/environments/docker drives `docker compose`; Debian
# bookworm ships only the 1.x docker-compose). Built from source, pinned in
# tools/docker-compose/go.mod (go.sum holds the hashes), into
# $T1FLOW_HOME/docker/cli-plugins/docker-compose: use it with
#   DOCKER_CONFIG=$T1FLOW_HOME/docker docker compose version
# Opt-in (`make compose`, and `make harbor-oracle-diff` which needs it): the
# build takes about 4 minutes on 2 cores from an empty module cache.
# Idempotent: a binary that reports the pinned version is kept.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOME_DIR=${T1FLOW_HOME:-$ROOT/.t1flow}
MOD=$ROOT/tools/docker-compose
PLUGINS=$HOME_DIR/docker/cli-plugins
BIN=$PLUGINS/docker-compose
say() { echo "ensure-docker-compose: $*" >&2; }

version=$(awk '$1 == "require" && $2 == "github.com/docker/compose/v5" {print $3}' "$MOD/go.mod")
[ -n "$version" ] || { say "$MOD/go.mod: no 'require github.com/docker/compose/v5 VERSION' line"; exit 1; }
if [ -x "$BIN" ] && "$BIN" version --short 2>/dev/null | grep -qx "${version#v}"; then
  exit 0
fi
mkdir -p "$PLUGINS"
start=$(date +%s)
say "building docker compose $version into $BIN (about 4 minutes on 2 cores, once)"
(cd "$MOD" && go build -trimpath \
  -ldflags "-s -w -X github.com/docker/compose/v5/internal.Version=$version" \
  -o "$BIN.tmp" github.com/docker/compose/v5/cmd)
mv "$BIN.tmp" "$BIN"
say "$BIN ready in $(( $(date +%s) - start )) s: $("$BIN" version)"
