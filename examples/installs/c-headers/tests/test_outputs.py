import os


def test_stdio_header():
    assert os.path.isfile("/usr/include/stdio.h")


def test_libc_link_library():
    assert os.path.exists("/usr/lib/x86_64-linux-gnu/libc.so")
