"""The `Field` a spec's schema is declared with, and the patterns and limits the declaration and the
validator share (the validator compiles these very patterns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class _Missing:
    """No default (or no example): the field is required, or absent means 'not set'."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

# Patterns as the validator writes them (tests compare each with the validator's compiled regex).
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
LABEL_VALUE = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
DNS_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DNS_SUBDOMAIN = r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?"
SECRET_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"  # noqa: S105 (a pattern, not a password)
BUCKET = r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}"
URL = r"https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[^\s@]*)?"
GROUP_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,63}"
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_HOST = (
    r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?"
)
IMAGE = (
    rf"(?:{_IMAGE_HOST}/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*:[0-9a-fA-F]{32,})?"
)
# The friendly quantities' text forms (values.parse_cpu_millis, parse_memory_mib, parse_duration_seconds).
_NUMBER = r" *(?:[0-9]{1,20}(?:\.[0-9]{1,20})?|\.[0-9]{1,20}) *"
CPU_TEXT = _NUMBER + r"m? *"
MEMORY_TEXT = _NUMBER + r"(?:[KkMmGgTt](?:[Ii][Bb]?|[Bb])|[kKMGT])? *"
DURATION_TEXT = r"\s*(?:[0-9]{1,11}|(?:[0-9]{1,9}[smhd])+)\s*"
MAX_METRIC_GROUPS = 8
MAX_METRIC_PATTERN = 500
MAX_PATH = 1024


@dataclass(frozen=True)
class Field:
    """One field of the spec. `types` are JSON types (empty: any value); the constraints apply to the
    values of their type only, as in JSON Schema (a `pattern` to strings, `minimum` to numbers).

    An object has `fields` (and, for volumes, `variants`: more fields chosen by its `discriminator`); a
    list has `items`; a mapping of free names has `values` (and `key_pattern`). `normalized` names the
    key the validator stores the value under when it differs (`cpu` → `cpu_millis`); `exclusive` names a
    sibling that may not be given with this one; `required_when` (sibling, value) makes it required when
    that sibling has that value. `default_text` says the default in words when it
    depends on other fields.
    """

    name: str
    types: tuple[str, ...]
    description: str
    example: Any = MISSING
    default: Any = MISSING
    default_text: str = ""
    required: bool = False
    null_ok: bool | None = None
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None
    pattern: str | None = None
    enum: tuple[Any, ...] = ()
    fields: tuple[Field, ...] = ()
    variants: tuple[tuple[str, tuple[Field, ...]], ...] = ()
    discriminator: str = ""
    items: Field | None = None
    min_items: int | None = None
    max_items: int | None = None
    values: Field | None = None
    key_pattern: str | None = None
    max_entries: int | None = None
    normalized: str = ""
    exclusive: str = ""
    units: str = ""
    required_when: tuple[str, Any] | None = None
    variant_examples: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def nullable(self) -> bool:
        """Whether null is taken as 'not given' (true of every optional field unless said otherwise)."""
        return (not self.required) if self.null_ok is None else self.null_ok

    def child(self, name: str) -> Field:
        """The named field of this object, among its common fields and every variant's."""
        for candidate in self.fields + tuple(f for _, fs in self.variants for f in fs):
            if candidate.name == name:
                return candidate
        raise KeyError(name)


def pair(name: str, item: Field, description: str, example: list[Any], **extra: Any) -> Field:
    return Field(
        name, ("array",), description, example=example, items=item, min_items=2, max_items=2, **extra
    )
