import subprocess


def git(*args):
    return subprocess.run(["git", "-C", "/app/repo", *args], capture_output=True, text=True, check=True).stdout.strip()


def test_release_branch_exists():
    assert "release" in git("branch", "--format=%(refname:short)").split()


def test_main_unchanged():
    assert git("log", "--format=%s", "main").split("\n") == ["v2 and config", "ignore pyc", "add app"]


def test_release_builds_on_main():
    assert git("merge-base", "--is-ancestor", "main", "release") == ""
    assert git("rev-list", "--count", "main..release") == "1"


def test_secret_removed_and_ignored():
    files = git("ls-tree", "-r", "--name-only", "release").split("\n")
    assert "secrets.env" not in files and "app.py" in files
    assert "secrets.env" in git("show", "release:.gitignore").split("\n")


def test_annotated_tag():
    assert git("cat-file", "-t", "v1.0") == "tag"
    assert git("rev-parse", "v1.0^{commit}") == git("rev-parse", "release")
    assert git("tag", "-l", "--format=%(contents:subject)", "v1.0") == "first release"


def test_clean_tree():
    assert git("status", "--porcelain") == ""
