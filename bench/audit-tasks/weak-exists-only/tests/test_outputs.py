import os


def test_output_exists():
    assert os.path.exists("/app/sorted_names.txt")
