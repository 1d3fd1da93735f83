import sys
from pathlib import Path

sys.path.insert(0, "/tests")
import gen_data  # noqa: E402


def test_sum_matches_the_generated_numbers():
    assert int(Path("/app/sum.txt").read_text().strip()) == sum(gen_data.numbers())
