#!/bin/bash
mkdir -p /logs/verifier
cd /tests
python3 -m pytest -q --junitxml=/logs/verifier/junit.xml test_outputs.py
