from pathlib import Path

ROOT = Path("/var/cache/app")
OLD = ["/var/cache/app/a/b/old3.tmp", "/var/cache/app/a/old2.cache", "/var/cache/app/old1.tmp"]


def test_old_cache_files_deleted():
    for p in OLD:
        assert not Path(p).exists(), p


def test_recent_and_other_files_kept():
    for p in ["new1.tmp", "a/new2.cache", "c/new3.log", "c/keep-old.log"]:
        assert (ROOT / p).is_file(), p


def test_directories_kept():
    assert (ROOT / "old-dir.tmp").is_dir() and (ROOT / "a/b").is_dir()


def test_log_lists_deleted_sorted():
    assert Path("/root/cleanup.log").read_text().split() == sorted(OLD)
