def test_total():
    assert open("/app/fruit_total.txt").read().strip() == "42"
