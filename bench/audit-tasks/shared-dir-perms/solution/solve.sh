#!/bin/bash
set -e
mkdir -p /srv/share
chmod 2775 /srv/share
echo 'shared files live here' > /srv/share/README
chmod 0644 /srv/share/README
