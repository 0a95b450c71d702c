"""The Kubernetes type definitions kubesim publishes, taken from kubernetes-validate's packaged schemas.

kubernetes-validate ships each Kubernetes release's OpenAPI definitions rewritten as JSON Schema (nullable
types, ``#/$defs/`` references, ``oneOf`` for IntOrString and Quantity, an ``enum`` on apiVersion and kind).
This module undoes those rewrites to get the definitions back in the apiserver's OpenAPI form.
"""

from __future__ import annotations

import functools
import json
from importlib import resources as importlib_resources
from typing import Any

Obj = dict[str, Any]

_SOURCE_PREFIX = "#/$defs/"
V2_PREFIX = "#/definitions/"
V3_PREFIX = "#/components/schemas/"
# Meta kinds whose definitions every group version shares (request and response bodies of its paths).
_SHARED_KINDS = ("DeleteOptions", "Status", "WatchEvent")
# Bodies of the subresources kubesim serves beyond its stored kinds (pods/binding, pods/eviction).
_BODY_KINDS = (("", "v1", "Binding"), ("policy", "v1", "Eviction"))


@functools.cache
def source_definitions(k8s_version: str) -> dict[str, Obj]:
    """kubernetes-validate's JSON Schema definitions for one release (``"1.32.0"``), keyed by type name."""
    root = importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    text = root.joinpath(f"v{k8s_version}-local", "_definitions.json").read_text()
    defs: dict[str, Obj] = json.loads(text)["$defs"]
    return defs


def _primitive(schema: Obj) -> Obj:
    """IntOrString and Quantity: a ``oneOf`` of primitives in the source, a string in OpenAPI."""
    kinds = {t for alt in schema["oneOf"] for t in _types(alt)}
    restored: Obj = {"type": "string"}
    if "integer" in kinds:
        restored["format"] = "int-or-string"
    return restored


def _types(schema: Obj) -> list[str]:
    value = schema.get("type")
    if value is None:
        return []
    return [value] if isinstance(value, str) else [t for t in value if t != "null"]


def restore(schema: Any, prefix: str, *, top: bool = False) -> Any:
    """One source schema in OpenAPI form, its references pointing under ``prefix``."""
    if not isinstance(schema, dict):
        return schema
    if "oneOf" in schema and all(_types(alt) and "$ref" not in alt for alt in schema["oneOf"]):
        return {**{k: v for k, v in schema.items() if k != "oneOf"}, **_primitive(schema)}
    result: Obj = {}
    for key, value in schema.items():
        if key == "$ref":
            result[key] = prefix + value.removeprefix(_SOURCE_PREFIX)
        elif key == "type":
            types = _types(schema)
            if types:
                result[key] = types[0]
        elif key == "properties":
            result[key] = {
                name: _drop_kind_enum(name, restore(sub, prefix)) if top else restore(sub, prefix)
                for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties"):
            result[key] = restore(value, prefix)
        else:
            result[key] = value
    return result


def _drop_kind_enum(name: str, schema: Obj) -> Obj:
    if name in ("apiVersion", "kind"):
        schema.pop("enum", None)
    return schema


def references(schema: Any, prefix: str) -> set[str]:
    """Names of the definitions a schema refers to (one level: not following them)."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(prefix):
                found.add(value.removeprefix(prefix))
            else:
                found |= references(value, prefix)
    elif isinstance(schema, list):
        for item in schema:
            found |= references(item, prefix)
    return found


def wanted_gvks(served: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """The (group, version, kind) triples to publish: served kinds, their lists, shared meta kinds, bodies."""
    wanted = set(_BODY_KINDS)
    for group, version, kind in served:
        wanted |= {(group, version, kind), (group, version, f"{kind}List")}
        wanted |= {(group, version, meta) for meta in _SHARED_KINDS}
    return wanted


def definitions(
    k8s_version: str, served: list[tuple[str, str, str]], prefix: str, extra: set[str] | None = None
) -> dict[str, Obj]:
    """Definitions of the served kinds, of ``extra`` (types the paths name) and of every type they reach,
    each GVK extension cut to the kinds kubesim serves."""
    source = source_definitions(k8s_version)
    wanted = wanted_gvks(served)

    def gvks(schema: Obj) -> list[Obj]:
        listed = schema.get("x-kubernetes-group-version-kind") or []
        return [g for g in listed if (g["group"], g["version"], g["kind"]) in wanted]

    pending = sorted({name for name, schema in source.items() if gvks(schema)} | (extra or set()))
    result: dict[str, Obj] = {}
    while pending:
        name = pending.pop()
        if name in result:
            continue
        schema = source[name]
        result[name] = restore(schema, prefix, top=True)
        if "x-kubernetes-group-version-kind" in schema:
            result[name]["x-kubernetes-group-version-kind"] = gvks(schema)
            if not gvks(schema):
                del result[name]["x-kubernetes-group-version-kind"]
        pending.extend(sorted(references(result[name], prefix) - result.keys()))
    return dict(sorted(result.items()))
