def median(xs):
    xs.sort()
    n = len(xs)
    return xs[n // 2]


def moving_average(xs, k):
    out = []
    for i in range(len(xs) - k):
        out.append(sum(xs[i:i + k]) / k)
    return out
