"""Kubernetes resource quantities ("500m", "1Gi", "2") parsed to numbers and formatted back."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


class QuantityError(ValueError):
    """Raised for a string that is not a valid quantity."""


def parse_quantity(value: object) -> Decimal:
    """Return the exact numeric value of a quantity such as ``"250m"``, ``"1.5Gi"`` or ``4``."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = str(value).strip()
    if not text:
        raise QuantityError("empty quantity")
    for suffix, mult in _BINARY.items():
        if text.endswith(suffix):
            return _number(text[: -len(suffix)], value) * mult
    if text[-1] in "numkMGTPE":
        return _number(text[:-1], value) * _DECIMAL[text[-1]]
    return _number(text, value)


def _number(text: str, original: object) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:
        raise QuantityError(f"quantities must match the regular expression: {original!r}") from None


def is_quantity(value: object) -> bool:
    """Tell whether ``value`` parses as a quantity."""
    try:
        parse_quantity(value)
    except QuantityError:
        return False
    return True


def format_cpu(cores: Decimal | float) -> str:
    """Format a CPU amount the way the apiserver does: whole cores plainly, else millicores."""
    dec = Decimal(str(cores))
    if dec == dec.to_integral_value():
        return str(int(dec))
    return f"{int((dec * 1000).to_integral_value())}m"


def format_amount(resource: str, value: Decimal) -> str:
    """Format a quantity for messages and ``status.used``: CPU as cores/millicores, bytes plainly."""
    if resource.endswith("cpu"):
        return format_cpu(value)
    if value == value.to_integral_value():
        return _binary_suffix(int(value))
    return str(value)


def _binary_suffix(num: int) -> str:
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        mult = _BINARY[suffix]
        if num and num % mult == 0:
            return f"{num // mult}{suffix}"
    return str(num)
