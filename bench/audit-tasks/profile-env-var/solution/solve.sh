#!/bin/bash
set -e
mkdir -p /opt/app/bin
printf 'export APP_HOME=/opt/app\nexport PATH="/opt/app/bin:$PATH"\n' > /etc/profile.d/app.sh
