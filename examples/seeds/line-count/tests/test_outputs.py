def test_line_count():
    want = len(open("/app/input.txt").read().splitlines())
    assert int(open("/app/lines.txt").read().strip()) == want
