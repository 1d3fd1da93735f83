import glob
import pwd
import re


def test_module_installed():
    assert glob.glob("/usr/lib/x86_64-linux-gnu/libnss_systemd.so.2") or glob.glob("/lib/x86_64-linux-gnu/libnss_systemd.so.2")


def test_nsswitch_names_systemd():
    conf = open("/etc/nsswitch.conf").read()
    for db in ("passwd", "group"):
        line = re.search(r"^%s:(.*)$" % db, conf, re.M)
        assert line and "systemd" in line.group(1).split(), db


def test_files_users_still_resolve():
    assert pwd.getpwnam("root").pw_uid == 0
