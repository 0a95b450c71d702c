"""Label selectors (equality and set-based) and field selectors, as in ``?labelSelector=``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector string that cannot be parsed or uses an unsupported field."""


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key op values``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Tell whether a label map satisfies this clause."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "==", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        raise SelectorError(f"unknown operator {self.op}")


_SET_RE = re.compile(r"^\s*(\S+?)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^=!\s]+)\s*(==|!=|=)\s*(\S*)\s*$")
_KEY_RE = re.compile(
    r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _split_clauses(text: str) -> list[str]:
    clauses, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            clauses.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        clauses.append(current)
    return clauses


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h`` into requirements (all must hold)."""
    if not text:
        return []
    result = []
    for clause in _split_clauses(text):
        clause = clause.strip()
        if not clause:
            raise SelectorError(f"invalid label selector {text!r}")
        if m := _SET_RE.match(clause):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            result.append(Requirement(_check_key(m.group(1)), m.group(2), values))
        elif m := _EQ_RE.match(clause):
            result.append(Requirement(_check_key(m.group(1)), m.group(2), (m.group(3),)))
        elif clause.startswith("!"):
            result.append(Requirement(_check_key(clause[1:].strip()), "!exists"))
        else:
            result.append(Requirement(_check_key(clause), "exists"))
    return result


def _check_key(key: str) -> str:
    if not _KEY_RE.match(key):
        raise SelectorError(f"invalid label key {key!r}")
    return key


def labels_match(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    """Tell whether labels satisfy every requirement."""
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


def selector_from_label_selector_object(sel: Mapping[str, Any] | None) -> list[Requirement]:
    """Convert a ``LabelSelector`` object (matchLabels/matchExpressions) into requirements."""
    if not sel:
        return []
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (sel.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in sel.get("matchExpressions") or []:
        reqs.append(Requirement(expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
    return reqs


FieldGetter = Callable[[Mapping[str, Any]], Any]


def _involved(field: str) -> FieldGetter:
    return lambda o: (o.get("involvedObject") or {}).get(field)


def _event_fields() -> dict[str, FieldGetter]:
    fields = {
        f"involvedObject.{f}": _involved(f)
        for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    fields.update(
        {"reason": lambda o: o.get("reason"), "type": lambda o: o.get("type"), "source": lambda o: None}
    )
    return fields


_COMMON_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": lambda o: o.get("metadata", {}).get("name"),
    "metadata.namespace": lambda o: o.get("metadata", {}).get("namespace"),
}
_EXTRA_FIELDS: dict[str, dict[str, FieldGetter]] = {
    "pods": {
        "status.phase": lambda o: (o.get("status") or {}).get("phase"),
        "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName"),
        "spec.restartPolicy": lambda o: (o.get("spec") or {}).get("restartPolicy"),
        "spec.schedulerName": lambda o: (o.get("spec") or {}).get("schedulerName"),
        "spec.serviceAccountName": lambda o: (o.get("spec") or {}).get("serviceAccountName"),
        "status.podIP": lambda o: (o.get("status") or {}).get("podIP"),
    },
    "events": _event_fields(),
    "namespaces": {"status.phase": lambda o: (o.get("status") or {}).get("phase")},
    "nodes": {"spec.unschedulable": lambda o: str(bool((o.get("spec") or {}).get("unschedulable"))).lower()},
    "secrets": {"type": lambda o: o.get("type")},
}


@dataclass(frozen=True)
class FieldRequirement:
    """One clause of a field selector."""

    field: str
    negate: bool
    value: str
    getter: FieldGetter

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Tell whether the object's field equals (or, negated, differs from) the value."""
        actual = self.getter(obj)
        actual_text = "" if actual is None else str(actual)
        return (actual_text == self.value) != self.negate


def parse_field_selector(text: str | None, resource: str) -> list[FieldRequirement]:
    """Parse ``metadata.name=x,status.phase!=Failed``; unknown fields raise (the server answers 400)."""
    if not text:
        return []
    allowed = _COMMON_FIELDS | _EXTRA_FIELDS.get(resource, {})
    result = []
    for clause in text.split(","):
        m = re.match(r"^\s*([^=!\s]+)\s*(==|!=|=)\s*(.*?)\s*$", clause)
        if not m:
            raise SelectorError(f"invalid field selector {text!r}")
        field = m.group(1)
        if field not in allowed:
            raise SelectorError(f'field label not supported: "{field}"')
        result.append(FieldRequirement(field, m.group(2) == "!=", m.group(3), allowed[field]))
    return result


def fields_match(requirements: list[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    """Tell whether an object satisfies every field clause."""
    return all(r.matches(obj) for r in requirements)
