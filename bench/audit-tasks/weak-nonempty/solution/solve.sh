#!/bin/bash
set -e
tr a-z A-Z < /app/doc.txt > /app/DOC.txt
