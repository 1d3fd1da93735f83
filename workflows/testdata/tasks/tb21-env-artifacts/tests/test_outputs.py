import os


def test_env_reaches_the_verifier():
    assert os.environ.get("REPORT_DIR") == "/app/report"


def test_report_uses_both_envs():
    with open("/app/report/report.txt") as f:
        assert f.read().strip() == "Inventory: 42 widgets"


def test_summary():
    with open("/app/summary.txt") as f:
        assert f.read().strip() == "done"
