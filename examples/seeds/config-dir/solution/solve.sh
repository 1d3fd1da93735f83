#!/bin/bash
mkdir -p /etc/app
chmod 750 /etc/app
echo "port=8080" > /etc/app/app.conf
