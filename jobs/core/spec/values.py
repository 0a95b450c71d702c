"""Limits, unit parsing and message helpers shared by the spec validator.

Units: CPU is cores (`2`, `0.5`, `"2"`) or millicores (`"500m"`). Memory without a unit is MiB;
Kubernetes' binary suffixes (`Ki`, `Mi`, `Gi`, `Ti`) and FfDL's (`Kb`, `Mb`, `Gb`, `Tb`, `KiB`,
`MiB`, `GB`, ... in any case) are powers of 1024, as FfDL treated them; Kubernetes' decimal
suffixes (`k`/`K`, `M`, `G`, `T`) are powers of 1000. Memory is rounded up to whole MiB.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

MAX_LEARNERS = 64
MAX_GPUS_PER_LEARNER = 16
CPU_MILLIS_RANGE = (10, 256_000)
MEMORY_MIB_RANGE = (16, 2 * 1024 * 1024)
MAX_RUNTIME_SECONDS = 90 * 86_400
MAX_COMMAND_BYTES = 16 * 1024
MAX_ENV_ENTRIES = 100
MAX_ENV_VALUE = 4096
MAX_VOLUMES = 16

_MEMORY_BINARY = {"k": 1, "m": 2, "g": 3, "t": 4}
_MEMORY_DECIMAL = {"k": 1, "K": 1, "M": 2, "G": 3, "T": 4}
_NUMBER_UNIT = re.compile(r" *([0-9]{1,20}(?:\.[0-9]{1,20})?|\.[0-9]{1,20}) *([A-Za-z]{0,3}) *")
_DURATION = re.compile(r"(?:[0-9]{1,9}[smhd])+")
_DURATION_PART = re.compile(r"([0-9]+)([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_BIG = 10**15


def parse_cpu_millis(value: Any) -> int:
    """CPU as millicores from cores (`2`, `0.5`, `"2"`) or Kubernetes millicores (`"500m"`).

    Raises ValueError with a user-facing message when the value cannot be read.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a number of cores (2, 0.5) or millicores ('500m'), got {type_name(value)}")
    if isinstance(value, str):
        match = _NUMBER_UNIT.fullmatch(value)
        if not match or match.group(2) not in ("", "m"):
            raise ValueError(f"cannot read {show(value)}; use cores (2, 0.5) or millicores ('500m')")
        amount = Decimal(match.group(1)) * (1 if match.group(2) == "m" else 1000)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")
    else:
        # A float's shortest repr is what the user wrote (0.1, not 0.1000000000000000055...).
        amount = Decimal(repr(value)) * 1000 if abs(value) < _BIG else Decimal(_BIG)
    if amount != amount.to_integral_value():
        raise ValueError("must be a whole number of millicores (steps of 0.001 cores)")
    return int(amount)


def parse_memory_mib(value: Any) -> int:
    """Memory in MiB, rounded up, from a number (MiB) or a quantity like "4Gi", "1G", "16GB", "300MiB".

    Raises ValueError with a user-facing message when the value or its unit cannot be read.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            f"must be a quantity like '4Gi' or '512Mi' or a number of MiB, got {type_name(value)}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")
    if not isinstance(value, str):
        return math.ceil(Decimal(value) if abs(value) < _BIG else Decimal(_BIG))
    match = _NUMBER_UNIT.fullmatch(value)
    if not match:
        raise ValueError(f"cannot read {show(value)}; use a number and a unit, like '4Gi', '512Mi', '16GB'")
    number, unit = Decimal(match.group(1)), match.group(2)
    lower = unit.lower()
    if unit == "":
        return math.ceil(number)
    if unit in _MEMORY_DECIMAL:
        return math.ceil(number * 1000 ** _MEMORY_DECIMAL[unit] / 1024**2)
    if lower[:1] in _MEMORY_BINARY and lower[1:] in ("i", "ib", "b"):
        return math.ceil(number * 1024 ** _MEMORY_BINARY[lower[0]] / 1024**2)
    if unit == "m":
        raise ValueError("unit 'm' means milli in Kubernetes; write Mi or MiB for mebibytes")
    raise ValueError(
        f"unknown unit {show(unit)}; use Mi, Gi, Ti, MiB, GiB, Mb, Gb (powers of 1024) "
        "or M, G (powers of 1000)"
    )


def parse_duration_seconds(value: Any) -> int:
    """A duration in seconds from an int or a string like "90m", "2h", "1d", "1h30m".

    Raises ValueError with a user-facing message when the value cannot be read.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) < 12:
            return int(text)
        if _DURATION.fullmatch(text):
            return sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    raise ValueError(f"must be seconds or a duration like '90m', '2h', '1d', got {show(value)}")


class Errors:
    """Collects messages by field path so that a spec reports every problem at once."""

    def __init__(self) -> None:
        self.by_path: dict[str, list[str]] = {}

    def add(self, path: str, message: str) -> None:
        self.by_path.setdefault(path or "spec", []).append(message)


def check_keys(
    data: Mapping[Any, Any],
    path: str,
    allowed: tuple[str, ...],
    errors: Errors,
    hints: Mapping[str, str] | None = None,
) -> None:
    """Report every key of `data` that is not in `allowed`, suggesting the nearest accepted name."""
    for key in data:
        if not isinstance(key, str):
            errors.add(path, f"field names must be strings, got {type_name(key)} {show(key)}")
        elif key not in allowed:
            guess = (hints or {}).get(key) or next(
                iter(difflib.get_close_matches(key[:100], allowed, n=1, cutoff=0.75)), None
            )
            advice = f"did you mean '{guess}'?" if guess else f"accepted: {', '.join(allowed)}"
            errors.add(join(path, key), f"unknown field; {advice}")


def clean_text(text: str) -> bool:
    """Whether text can be stored and passed to a process: no NUL, no lone surrogates."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def type_name(value: Any) -> str:
    """How a value's type is named in messages: 'a mapping', 'a list', 'a string', 'null', ..."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    names = {list: "a list", tuple: "a list", str: "a string", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def show(value: Any) -> str:
    """A short, safe rendering of a user value for messages (strings cut at 40 characters)."""
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "…")
    if isinstance(value, bool | float) or (isinstance(value, int) and abs(value) < 10**30):
        return repr(value)
    return "a very large number" if isinstance(value, int) else type_name(value)


def join(path: str, key: Any) -> str:
    """The path of `key` under `path`, e.g. 'resources.gpus'; odd keys are shown quoted and cut."""
    label = key if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_.-]{1,60}", key) else show(key)
    return f"{path}.{label}" if path else label
