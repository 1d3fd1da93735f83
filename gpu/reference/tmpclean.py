"""A pytest hook both Python suites (gpu/reference, gpu/hf) import in their
conftest.py: a session that passed removes its tmp_path directories.

Their checkpoint-heavy tests write trainer state and checkpoints under
tmp_path, and pytest keeps the last 3 runs' (8.8 GB was once found under
/tmp/pytest-of-root). Debian's pytest 7.2 has no tmp_path_retention_policy
(7.3+), so this is done here: a failed session keeps its directories to
look at (and pytest still keeps at most 3 runs); a given --basetemp is left
as it is.
"""
import shutil


def pytest_sessionfinish(session, exitstatus):
    if exitstatus != 0:
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or getattr(factory, "_given_basetemp", None) is not None:
        return
    base = getattr(factory, "_basetemp", None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)
