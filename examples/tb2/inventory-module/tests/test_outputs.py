import importlib.util

import pytest

STOCK = "/app/stock.csv"


def module():
    spec = importlib.util.spec_from_file_location("inventory", "/app/inventory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_load_types():
    rows = module().load(STOCK)
    assert [r["sku"] for r in rows] == ["A1", "B2", "C3"]
    assert rows[0]["qty"] == 4 and isinstance(rows[0]["qty"], int)
    assert rows[2]["price"] == 0.75 and isinstance(rows[2]["price"], float)


def test_in_stock():
    m = module()
    assert m.in_stock(m.load(STOCK)) == ["A1", "C3"]


def test_value():
    m = module()
    assert m.value(m.load(STOCK)) == 19.0


def test_restock_is_pure():
    m = module()
    rows = m.load(STOCK)
    new = m.restock(rows, "B2", 5)
    assert [r["qty"] for r in new] == [4, 5, 12]
    assert [r["qty"] for r in rows] == [4, 0, 12]


def test_restock_rejects_bad_input():
    m = module()
    rows = m.load(STOCK)
    with pytest.raises(ValueError):
        m.restock(rows, "A1", 0)
    with pytest.raises(KeyError):
        m.restock(rows, "ZZ", 1)
