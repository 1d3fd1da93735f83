#!/bin/bash
wc -l < /app/input.txt > /app/lines.txt
