import subprocess
import tempfile


def run(text):
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write(text)
    return subprocess.run(["bash", "/app/dedupe.sh", f.name], capture_output=True, text=True).stdout


def test_dedupe_order():
    assert run("b\na\nb\nc\na\n") == "b\na\nc\n"


def test_no_dupes():
    assert run("x\ny\n") == "x\ny\n"


def test_runs_logged():
    run("q\n")
    assert len(open("/app/state/runs.log").read().splitlines()) >= 1
