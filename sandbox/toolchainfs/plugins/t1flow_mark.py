"""Marks that the test runner started, so a verifier that never ran (command
not found, no interpreter, unresolvable packages) is a verifier error rather
than a reward of 0. Loaded by the sealed verifier with -p t1flow_mark."""
import os


def pytest_configure(config):
    path = os.environ.get("T1FLOW_RUNNER_MARK")
    if path:
        try:
            with open(path, "a") as f:
                f.write("pytest started\n")
        except OSError:
            pass
