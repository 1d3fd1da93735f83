#!/bin/bash
# Relative paths: the oracle starts in environment.workdir, as agent.user.
set -e
id -un > whoami.txt
pwd > where.txt
