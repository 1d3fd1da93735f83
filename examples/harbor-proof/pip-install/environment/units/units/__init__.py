"""Length units: a tiny library installed into the image with pip."""

FACTORS = {"m": 1.0, "cm": 0.01, "mm": 0.001, "km": 1000.0, "in": 0.0254, "ft": 0.3048, "mi": 1609.344}


def to_metres(value, unit):
    """value in unit, converted to metres."""
    try:
        return float(value) * FACTORS[unit]
    except KeyError:
        raise ValueError(f"unknown unit {unit!r}") from None
