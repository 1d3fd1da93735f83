def test_greeting():
    assert open("/app/greeting.txt").read() == "hello from t1flow\n"
