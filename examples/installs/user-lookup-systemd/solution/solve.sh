#!/bin/bash
# An ordinary install from Debian's mirror: adds libnss_systemd.so.2 and,
# through the package's postinst, `systemd` to nsswitch.conf's passwd and group.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends libnss-systemd
