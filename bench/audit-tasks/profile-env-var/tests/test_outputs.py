import os
import subprocess


def login(cmd):
    return subprocess.run(["bash", "-c", ". /etc/profile.d/app.sh; " + cmd], capture_output=True, text=True).stdout.strip()


def test_app_home():
    assert login("echo $APP_HOME") == "/opt/app"


def test_path():
    assert "/opt/app/bin" in login("echo $PATH").split(":")


def test_bin_dir():
    assert os.path.isdir("/opt/app/bin")
