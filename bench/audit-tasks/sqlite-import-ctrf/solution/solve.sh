#!/bin/bash
set -e
python3 - <<'PY'
import csv, sqlite3
db = sqlite3.connect('/app/people.db')
db.execute('create table people (name text, age integer)')
db.executemany('insert into people values (?, ?)', [(r['name'], int(r['age'])) for r in csv.DictReader(open('/app/people.csv'))])
db.commit()
PY
