#!/bin/bash
# Runs every held-out test file; per-assertion results go to /logs/verifier/junit.xml.
mkdir -p /logs/verifier
cd /tests
python3 -m pytest -q -p no:cacheprovider --rootdir=/tests --junitxml=/logs/verifier/junit.xml /tests
