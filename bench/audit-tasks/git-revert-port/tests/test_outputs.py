import subprocess


def git(*args):
    return subprocess.run(["git", "-C", "/app/service", *args], capture_output=True, text=True).stdout.strip()


def test_port_restored():
    assert "port=8080" in open("/app/service/config.ini").read().split()


def test_revert_commit():
    log = git("log", "--format=%s").split("\n")
    assert len(log) == 3 and log[0].startswith("Revert")


def test_clean_tree():
    assert git("status", "--porcelain") == ""
