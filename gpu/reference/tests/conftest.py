import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tmpclean import pytest_sessionfinish  # noqa: E402,F401  (a passing run leaves no tmp_path behind)
