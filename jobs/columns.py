"""Columns the scheduler cycle reads by the ten thousand, computed by PostgreSQL as plain floats and text.

Django's loaders for JSON and timezone-aware datetimes are pure Python, and any column with a converter
sends every row through Django's converter loop; a cycle reads each queued job, so these expressions hand
back what psycopg loads natively: `KT` text for a string in the spec, a cast for a number in it, epoch
seconds for a time (PostgreSQL 15 computes them exactly: the very float `datetime.timestamp()` gives).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DurationField, ExpressionWrapper, F, FloatField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Extract

__all__ = ["KT", "elapsed", "epoch", "spec_number"]


class _Float(Cast):
    """A cast to double precision, which psycopg loads as a float already: no per-row converter."""

    def __init__(self, expression: Any) -> None:
        super().__init__(expression, FloatField())

    def get_db_converters(self, connection: BaseDatabaseWrapper) -> list[Any]:
        return []


def epoch(*fields: str) -> _Float:
    """Seconds since the epoch of the first of `fields` that is set (None when none is)."""
    return _Float(Extract(Coalesce(*fields) if len(fields) > 1 else F(fields[0]), "epoch"))


def elapsed(start: str, end: str) -> _Float:
    """Seconds from `start` to `end` (exact: PostgreSQL's interval, not a difference of two floats)."""
    return _Float(Extract(ExpressionWrapper(F(end) - F(start), output_field=DurationField()), "epoch"))


def spec_number(key: str) -> _Float:
    """A number in the spec (`max_runtime_seconds`, a path such as `resources__gpus`), None when absent."""
    return _Float(KT(f"spec__{key}"))
