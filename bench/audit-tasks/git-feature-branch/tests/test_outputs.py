import subprocess


def git(*args):
    return subprocess.run(["git", "-C", "/app/proj", *args], capture_output=True, text=True).stdout.strip()


def test_branch_commit():
    assert git("log", "-1", "--format=%s", "feature/docs") == "add docs index"


def test_file_on_branch():
    assert git("show", "feature/docs:docs/INDEX.md") == "# Docs"


def test_main_untouched():
    assert git("rev-list", "--count", "main") == "1"
