import urllib.request
from pathlib import Path


def get(path):
    with urllib.request.urlopen("http://127.0.0.1:8000" + path, timeout=5) as r:
        return r.read().decode()


def test_server_code_exists():
    assert Path("/app/server.py").is_file()


def test_health():
    assert get("/health") == "ok"


def test_sum():
    assert get("/sum?a=20&b=22") == "42"
