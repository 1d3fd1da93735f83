import json

D = json.load(open("/app/conf/defaults.json"))
L = json.load(open("/app/conf/local.json"))


def test_merged_keys():
    m = json.load(open("/app/conf/merged.json"))
    assert set(m) == set(D) | set(L)


def test_local_wins():
    m = json.load(open("/app/conf/merged.json"))
    assert all(m[k] == v for k, v in L.items())
    assert all(m[k] == v for k, v in D.items() if k not in L)
