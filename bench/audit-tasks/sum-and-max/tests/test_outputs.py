NUMS = [int(x) for x in open("/app/numbers.txt").read().split()]


def test_sum():
    assert int(open("/app/sum.txt").read()) == sum(NUMS)


def test_max():
    assert int(open("/app/max.txt").read()) == max(NUMS)
