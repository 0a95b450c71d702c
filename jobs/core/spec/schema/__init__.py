"""The Trainyard job spec, declared once: every field with its type, default, limits, an example and what
the platform does with it.

This is the one source of truth the rest is generated from: the validator's lists of accepted keys
(`keys`, `variant_keys`), the JSON Schema (`jobs.core.spec.json_schema`), docs/spec.md and the portal's
/spec/ page (`jobs.core.spec.reference`), and the submit editor's completion. The value checks stay in
the validator (fields.py, volumes.py, metrics.py), whose messages are the users'; tests/jobs/
test_spec_schema.py proves the two agree (keys, defaults, bounds, patterns, enums). Adding a field is one
`Field` here plus its check in the validator. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Iterator

from jobs.core.spec.schema.field import (
    BUCKET,
    CPU_TEXT,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DURATION_TEXT,
    ENV_NAME,
    GROUP_NAME,
    IMAGE,
    LABEL_VALUE,
    MAX_METRIC_GROUPS,
    MAX_METRIC_PATTERN,
    MAX_PATH,
    MEMORY_TEXT,
    MISSING,
    SECRET_ID,
    URL,
    Field,
)
from jobs.core.spec.schema.spec import SPEC

__all__ = [
    "BUCKET", "CPU_TEXT", "DNS_LABEL", "DNS_SUBDOMAIN", "DURATION_TEXT", "ENV_NAME", "GROUP_NAME", "IMAGE",
    "LABEL_VALUE", "MAX_METRIC_GROUPS", "MAX_METRIC_PATTERN", "MAX_PATH", "MEMORY_TEXT", "MISSING", "SECRET_ID",
    "SPEC", "URL", "Field", "field_at", "keys", "variant_keys", "walk",
]  # fmt: skip


def _split(path: str) -> list[str]:
    return [part for part in path.replace("[]", ".[]").split(".") if part]


def field_at(path: str) -> Field:
    """The field at a path like `resources.cpu`, `volumes[].bucket`, `env[].name` or
    `evaluation_metrics.groups.*.regex` (`[]` a list's items, `*` a mapping's values); "" is the spec."""
    current = SPEC
    for part in _split(path):
        if part == "[]" and current.items is not None:
            current = current.items
        elif part == "*" and current.values is not None:
            current = current.values
        else:
            current = current.child(part)
    return current


def keys(path: str = "") -> tuple[str, ...]:
    """The names of the object at `path` (common fields only for one with variants), in declared order:
    what the validator accepts there."""
    return tuple(f.name for f in field_at(path).fields)


def variant_keys(path: str) -> dict[str, tuple[str, ...]]:
    """For an object with variants (a volume), the extra names each variant accepts."""
    return {value: tuple(f.name for f in fields) for value, fields in field_at(path).variants}


def walk(root: Field = SPEC, path: str = "") -> Iterator[tuple[str, Field, str]]:
    """Every field under `root` with its path and, for a variant's field, the variant's value; depth first
    in declared order. Paths use `[]` for list items and `*` for mapping values."""
    children: list[tuple[str, Field, str]] = [(f.name, f, "") for f in root.fields]
    children += [(f.name, f, value) for value, fs in root.variants for f in fs]
    for name, child, variant in children:
        where = f"{path}.{name}" if path else name
        yield where, child, variant
        yield from walk(child, where)
    for node, where in ((root.items, f"{path}[]"), (root.values, f"{path}.*")):
        if node is not None and node.fields:
            yield where, node, ""
            yield from walk(node, where)
