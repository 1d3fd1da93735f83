import grp
import os
import pwd
import stat


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_user_and_group():
    u = pwd.getpwnam("appsvc")
    assert grp.getgrgid(u.pw_gid).gr_name == "appsvc"
    assert u.pw_uid < 1000  # a system account


def test_home_and_shell():
    u = pwd.getpwnam("appsvc")
    assert u.pw_dir == "/srv/app"
    assert u.pw_shell == "/usr/sbin/nologin"


def test_ownership_recursive():
    u = pwd.getpwnam("appsvc")
    for root, dirs, files in os.walk("/srv/app"):
        for p in [root] + [os.path.join(root, f) for f in files]:
            st = os.stat(p)
            assert (st.st_uid, st.st_gid) == (u.pw_uid, u.pw_gid), p


def test_data_mode():
    assert mode("/srv/app/data") == 0o750


def test_config_mode():
    assert mode("/srv/app/config.ini") == 0o640


def test_run_sh_mode():
    assert mode("/srv/app/run.sh") == 0o700
