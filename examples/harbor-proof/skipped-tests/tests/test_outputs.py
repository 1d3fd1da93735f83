# Two tests are skipped, as real suites skip checks that do not apply: pytest
# exits 0 with them, so Harbor's reward is 1 when the rest pass.
import shutil
import sys
from pathlib import Path

import pytest


def test_upper_exists():
    assert Path("/app/upper.txt").is_file()


def test_upper_lines():
    assert Path("/app/upper.txt").read_text().split() == ["ALPHA", "BETA", "GAMMA", "DELTA"]


@pytest.mark.skip(reason="locale-specific case mapping is not part of this task")
def test_turkish_dotted_i():
    assert "i".upper() == "İ"


@pytest.mark.skipif(shutil.which("t1flow-never-installed") is None, reason="optional tool not installed")
def test_optional_tool():
    assert False


def test_words_unchanged():
    assert Path("/app/words.txt").read_text() == "alpha\nbeta\ngamma\ndelta\n"
