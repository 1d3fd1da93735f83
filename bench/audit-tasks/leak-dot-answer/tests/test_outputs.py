def test_count():
    assert open("/app/result.txt").read().strip() == "4"
