#!/bin/bash
set -e
sed -i -e 's/^workers = .*/workers = 8/' -e 's/^log_level = .*/log_level = info/' /app/conf/server.conf
