#!/bin/bash
grep -c 'ERROR' /app/service.log > /app/error_count.txt
