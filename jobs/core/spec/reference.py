"""The spec reference, generated from `jobs.core.spec.schema`: one row per field for the portal's /spec/
page and the editor's completion, docs/spec.md as Markdown, and the FfDL manifest mapping.

The FfDL mapping (`FFDL_MAPPING`) is `jobs.core.ffdl`'s table, the one the translator reads: every key of
FfDL's manifest, translated, ignored or refused, with the reason; tests/jobs/test_spec_reference.py
translates each row's example with `ffdl.translate` and checks it lands where the row says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from jobs.core import ffdl
from jobs.core.spec.schema import MISSING, SPEC, Field, walk

REGENERATE = "python manage.py spec docs --write"

_TYPE_NAMES = {
    "string": "string",
    "integer": "whole number",
    "number": "number",
    "boolean": "true or false",
    "object": "mapping",
    "array": "list",
    "null": "null",
}


@dataclass(frozen=True)
class Row:
    """One field as the reference shows it."""

    path: str
    field: Field
    variant: str

    @property
    def display(self) -> str:
        """The path as users read it: `volumes[].bucket`, `evaluation_metrics.groups.<name>.regex`."""
        return self.path.replace(".*", ".<name>")

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.display.lower()).strip("-")

    @property
    def depth(self) -> int:
        return self.display.count(".") + self.display.count("[]")

    @property
    def type_text(self) -> str:
        return type_text(self.field)

    @property
    def default_text(self) -> str:
        if self.path.endswith(("[]", ".*")):
            return ""  # an item of a list, an entry of a mapping: there when written
        if self.field.required:
            return "required"
        if self.field.required_when is not None:
            sibling, value = self.field.required_when
            return f"required when `{sibling}` is `{value}`"
        if self.field.default_text:
            return self.field.default_text
        if self.field.default is MISSING:
            return "not set"
        return f"`{compact(self.field.default)}`"

    @property
    def limits(self) -> list[str]:
        return limits(self.field)

    @property
    def facts(self) -> list[str]:
        """The limits, and how the field relates to others (its stored name, the one it excludes)."""
        out = list(self.limits)
        if self.field.normalized:
            out.append(f"stored as `{self.field.normalized}`")
        if self.field.exclusive:
            out.append(f"not together with `{self.field.exclusive}`")
        return out

    @property
    def example_text(self) -> str:
        return "" if self.field.example is MISSING else compact(self.field.example)

    @property
    def only_for(self) -> str:
        """`type: s3` for a volume field of one type."""
        return f"type: {self.variant}" if self.variant else ""


def rows() -> list[Row]:
    """Every field of the spec, depth first in declared order."""
    return [Row(path, field, variant) for path, field, variant in walk(SPEC)]


def compact(value: Any) -> str:
    """A value as one line of YAML flow / JSON, the way a spec may write it."""
    return json.dumps(value, ensure_ascii=False)


def type_text(field: Field) -> str:
    """The field's type in words: `whole number`, `number or string`, `list of strings`."""
    if not field.types:
        return "any"
    names = []
    for kind in field.types:
        name = _TYPE_NAMES[kind]
        if kind == "array" and field.items is not None and field.items.types == ("string",):
            name = "list of strings"
        elif kind == "array" and field.max_items == 2 and field.min_items == 2:
            name = "[min, max] pair"
        elif kind == "object" and field.values is not None and not field.fields:
            name = "mapping of names to " + (
                "groups" if field.values.fields else " or ".join(_TYPE_NAMES[t] for t in field.values.types)
            )
        names.append(name)
    text = ", or ".join(names)
    return f"{text} ({field.units})" if field.units else text


def limits(field: Field) -> list[str]:
    """The field's constraints in words, one item each."""
    out: list[str] = []
    if field.minimum is not None and field.maximum is not None:
        out.append(f"from {_number(field.minimum)} to {_number(field.maximum)}")
    if field.max_length is not None:
        out.append(f"at most {field.max_length} characters")
    if field.enum:
        out.append("one of " + ", ".join(f"`{v}`" for v in field.enum))
    if field.max_items is not None and field.min_items != field.max_items and field.max_entries is None:
        out.append(f"at most {field.max_items} items")
    if field.max_entries is not None:
        out.append(f"at most {field.max_entries} entries")
    if field.key_pattern is not None:
        out.append(f"names match `{field.key_pattern}`")
    if field.pattern is not None:
        out.append(f"text matches `{field.pattern}`")
    return out


def _number(value: float) -> str:
    return f"{value:,}".replace(",", " ") if float(value).is_integer() else str(value)


FFDL_MAPPING = ffdl.FFDL_MAPPING


def markdown() -> str:
    """docs/spec.md: every field, then the FfDL mapping."""
    lines = [
        "# The job spec",
        "",
        "<!-- Generated from jobs/core/spec/schema/, jobs/core/spec/reference.py and jobs/core/ffdl/mapping.py by",
        f"     `{REGENERATE}`; do not edit by hand. -->",
        "",
        "A job is a YAML or JSON document in Trainyard's format (below) or an FfDL `manifest.yml` (see",
        "[FfDL manifests](#ffdl-manifests)). Examples are in `examples/specs/`. Check a spec without",
        "submitting it with `python manage.py spec validate FILE`; the same reference is in the portal at",
        "`/spec/`, and its JSON Schema (draft 2020-12) at `GET /api/v1/spec/schema/` or",
        "`python manage.py spec schema`. Only `name`, `image` and `command` are required:",
        "",
        "```yaml",
        yaml.safe_dump(SPEC.example, sort_keys=False, default_flow_style=None).rstrip(),
        "```",
        "",
        "Every problem is reported at once, by field path (`resources.gpus`, `volumes[1].bucket`). A field",
        "with no default is not set when left out; `null` means the same as leaving a field out.",
        "",
        "## Fields",
    ]
    for row in rows():
        lines += _markdown_row(row)
    lines += _markdown_ffdl()
    return "\n".join(lines) + "\n"


def _markdown_row(row: Row) -> list[str]:
    heading = "###" if row.depth == 0 else "####"
    lines = ["", f"{heading} `{row.display}`", "", row.field.description, ""]
    facts = [f"type: {row.type_text}"] + ([f"default: {row.default_text}"] if row.default_text else [])
    if row.only_for:
        facts.append(f"only for volumes of `{row.only_for}`")
    if row.limits:
        facts.append("limits: " + "; ".join(row.limits))
    if row.field.normalized:
        facts.append(f"stored as `{row.field.normalized}`")
    if row.field.exclusive:
        facts.append(f"not together with `{row.field.exclusive}`")
    if row.example_text:
        facts.append(f"example: `{row.example_text}`")
    return lines + [f"- {fact}" for fact in facts]


def _markdown_ffdl() -> list[str]:
    lines = [
        "",
        "## FfDL manifests",
        "",
        "A document with `framework` (or FfDL's `gpus`, `cpus`, `memory`, `data_stores`, ... and none of",
        "`image`, `command`, `resources`) is read as an FfDL manifest and translated into a Trainyard spec;",
        "errors name the FfDL fields. See `examples/specs/ffdl-manifest.yml`.",
        "",
        "Every key FfDL's manifest allows is translated, ignored (the reason says why) or refused (the",
        "reason is the error message).",
        "",
        "| FfDL key | Trainyard field | what happens |",
        "|---|---|---|",
    ]
    for row in FFDL_MAPPING:
        target = (
            ", ".join(f"`{t.strip()}`" for t in row.target.split(",")) if row.target else f"({row.handling})"
        )
        if row.target.startswith("("):
            target = row.target
        lines.append(f"| `{row.ffdl}` | {target} | {row.note} |")
    lines += ["", "`framework.name` picks the image:", "", "| framework | image |", "|---|---|"]
    lines += [f"| `{name}` | `{image}` |" for name, image in ffdl.FRAMEWORK_IMAGES.items()]
    lines += ["", "Refused, with the reason:", ""]
    lines += [f"- `{name}`: {reason}." for name, reason in ffdl.REFUSED_FRAMEWORKS.items()]
    return lines
