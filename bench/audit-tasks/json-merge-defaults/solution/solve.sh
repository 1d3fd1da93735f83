#!/bin/bash
set -e
python3 -c 'import json; a=json.load(open("/app/conf/defaults.json")); a.update(json.load(open("/app/conf/local.json"))); json.dump(a, open("/app/conf/merged.json","w"))'
