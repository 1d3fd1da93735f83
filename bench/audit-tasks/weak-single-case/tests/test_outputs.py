import subprocess


def test_square():
    assert subprocess.run(["/app/square.sh", "7"], capture_output=True, text=True).stdout.strip() == "49"
