#!/bin/bash
mkdir -p /logs/verifier
cd /tests
python3 -m pytest -q -p no:cacheprovider --rootdir=/tests --junitxml=/logs/verifier/junit.xml /tests
