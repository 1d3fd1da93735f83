#!/bin/bash
# An ordinary install from Debian's mirror: libc6-dev adds the link-time NSS
# names libnss_compat.so and libnss_hesiod.so (symlinks to the .so.2 modules).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends libc6-dev
