"""The JSON Schema (draft 2020-12) of a Trainyard spec, generated from `jobs.core.spec.schema`.

Editors and scripts check a spec's shape with it (types, names, limits, patterns); what only the
validator knows (distinct volume names, a tuning range containing the job's own value, a GPU type the
cluster has) is in the descriptions. `manage.py spec schema` prints it; GET /api/v1/spec/schema/
serves it.
"""

from __future__ import annotations

from typing import Any

from jobs.core.spec.schema import MISSING, SPEC, Field

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "https://trainyard.invalid/schemas/job-spec.json"


def json_schema() -> dict[str, Any]:
    """The whole spec's JSON Schema, with `$schema`, `$id` and a title."""
    body = _schema(SPEC)
    return {"$schema": DIALECT, "$id": SCHEMA_ID, "title": "Trainyard job spec", **body}


def anchored(pattern: str) -> str:
    """A validator pattern (matched whole with `fullmatch`) as JSON Schema wants it (searched)."""
    return f"^(?:{pattern})$"


def _schema(field: Field) -> dict[str, Any]:
    schema: dict[str, Any] = {"description": field.description}
    types = list(field.types)
    if types and field.nullable:
        types.append("null")
    if types:
        schema["type"] = types[0] if len(types) == 1 else types
    if field.default is not MISSING:
        schema["default"] = field.default
    if field.example is not MISSING:
        schema["examples"] = [field.example]
    for key, value in (
        ("minimum", field.minimum),
        ("maximum", field.maximum),
        ("maxLength", field.max_length),
        ("minItems", field.min_items),
        ("maxItems", field.max_items),
        ("maxProperties", field.max_entries),
    ):
        if value is not None:
            schema[key] = value
    if field.pattern is not None:
        schema["pattern"] = anchored(field.pattern)
    if field.enum:
        schema["enum"] = list(field.enum) + ([None] if field.nullable else [])
    if field.required and "string" in field.types and not field.enum:
        schema["minLength"] = 1
    if field.items is not None:
        schema["items"] = _schema(field.items)
    if field.values is not None:
        schema["additionalProperties"] = _schema(field.values)
        if field.key_pattern is not None:
            schema["propertyNames"] = {"pattern": anchored(field.key_pattern)}
    if field.fields:
        schema.update(_object(field))
    return schema


def _object(field: Field) -> dict[str, Any]:
    schema: dict[str, Any] = {"properties": {f.name: _schema(f) for f in field.fields}}
    required = [f.name for f in field.fields if f.required]
    if required:
        schema["required"] = required
    rules: list[dict[str, Any]] = [
        {"not": {"type": "object", "required": [f.name, f.exclusive]}}
        for f in field.fields
        if f.exclusive and f.name < f.exclusive
    ]
    for f in field.fields:
        if f.required_when is not None:
            sibling, value = f.required_when
            rules.append(
                {
                    "if": {"properties": {sibling: {"const": value}}, "required": [sibling]},
                    "then": {
                        "required": [f.name],
                        "properties": {f.name: {"type": "object", "minProperties": 1}},
                    },
                }
            )
    for value, fields in field.variants:
        then: dict[str, Any] = {"properties": {f.name: _schema(f) for f in fields}}
        needed = [f.name for f in fields if f.required]
        if needed:
            then["required"] = needed
        condition = {"properties": {field.discriminator: {"const": value}}, "required": [field.discriminator]}
        rules.append({"if": condition, "then": then})
    if rules:
        schema["allOf"] = rules
    # With variants, a variant's fields count as known only where its `then` applied.
    schema["unevaluatedProperties" if field.variants else "additionalProperties"] = False
    return schema
