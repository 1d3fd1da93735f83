#!/bin/bash
set -euo pipefail
groupadd --system appsvc
useradd --system --gid appsvc --home-dir /srv/app --shell /usr/sbin/nologin appsvc
chown -R appsvc:appsvc /srv/app
chmod 750 /srv/app/data
chmod 640 /srv/app/config.ini
chmod 700 /srv/app/run.sh
