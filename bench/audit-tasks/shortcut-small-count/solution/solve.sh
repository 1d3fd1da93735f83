#!/bin/bash
set -e
echo 3 > /app/bash_users.txt
