def test_average():
    assert open("/app/avg.txt").read().strip() == "7.0"
