import subprocess


def c2f(c):
    return subprocess.run(["/app/c2f.sh", c], capture_output=True, text=True).stdout.strip()


def test_boiling():
    assert c2f("100") == "212"


def test_freezing():
    assert c2f("0") == "32"
