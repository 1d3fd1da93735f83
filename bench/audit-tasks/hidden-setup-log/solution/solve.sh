#!/bin/bash
set -e
mkdir -p /srv/www
echo '<h1>ok</h1>' > /srv/www/index.html
chmod 0644 /srv/www/index.html
mkdir -p /var/log/site && echo 'site created' > /var/log/site/setup.log
