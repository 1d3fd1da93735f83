import os
import subprocess
import tempfile

SCRIPT = "/app/levels.sh"
LOG = """2024-05-01T10:00:00 INFO a
2024-05-01T10:00:01 ERROR b
not a log line
2024-05-01T10:00:02 INFO c
2024-05-01T10:00:03 DEBUG d
2024-05-01T10:00:04 ERROR e
2024-05-01T10:00:05 INFO f
INFO missing timestamp
"""


def run(path):
    return subprocess.run([SCRIPT, path], capture_output=True, text=True, timeout=20)


def test_script_is_executable():
    assert os.access(SCRIPT, os.X_OK)


def test_counts_sorted():
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(LOG)
    out = run(f.name)
    assert out.returncode == 0
    assert out.stdout.split("\n")[:3] == ["INFO 3", "ERROR 2", "DEBUG 1"]


def test_ties_by_name():
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write("2024-05-01T10:00:00 WARN x\n2024-05-01T10:00:00 ALERT y\n")
    assert run(f.name).stdout.split() == ["ALERT", "1", "WARN", "1"]


def test_missing_file():
    out = run("/nonexistent/file.log")
    assert out.returncode == 2 and out.stdout == ""
