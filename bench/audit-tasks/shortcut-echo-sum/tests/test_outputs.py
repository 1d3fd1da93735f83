def test_sum():
    assert open("/app/sum.txt").read().strip() == "159"
