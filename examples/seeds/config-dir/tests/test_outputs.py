import os
import stat


def test_dir_mode():
    assert stat.S_IMODE(os.stat("/etc/app").st_mode) == 0o750


def test_conf():
    assert open("/etc/app/app.conf").read().strip() == "port=8080"
