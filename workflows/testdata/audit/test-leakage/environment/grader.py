NUMS = [int(x) for x in open("/app/numbers.txt").read().split()]
assert int(open("/app/sum.txt").read()) == sum(NUMS)
