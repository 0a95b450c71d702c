"""Server-side field validation (``?fieldValidation=Strict|Warn|Ignore``) against the published schemas.

The apiserver decodes a request body into its Go type, so fields the type does not have are dropped; with
``Strict`` the request fails with 400 instead, with ``Warn`` (the default) each dropped field comes back as a
``Warning`` header. kubectl >= 1.25 sends ``Strict`` and skips its own schema check when the OpenAPI
document lists the parameter, so without this kubesim would quietly accept a misspelt manifest.
"""

from __future__ import annotations

import copy
from typing import Any

from kubesim import openapi
from kubesim.errors import bad_request
from kubesim.openapi import schemas
from kubesim.resources import Resource

Obj = dict[str, Any]
DIRECTIVES = ("Ignore", "Warn", "Strict")


def _walk(schema: Obj, value: Any, path: str, defs: dict[str, Obj], found: list[str]) -> None:
    while "$ref" in schema:
        schema = defs[schema["$ref"].removeprefix(schemas.V2_PREFIX)]
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is not None:
            for key in list(value):
                where = f"{path}.{key}" if path else key
                if key in props:
                    _walk(props[key], value[key], where, defs, found)
                elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                    found.append(where)
                    del value[key]
        elif isinstance(schema.get("additionalProperties"), dict):
            for key, item in value.items():
                _walk(schema["additionalProperties"], item, f"{path}.{key}" if path else key, defs, found)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(schema["items"], item, f"{path}[{i}]", defs, found)


def prune(res: Resource, obj: Any) -> tuple[Any, list[str]]:
    """A copy of ``obj`` without the fields the kind's schema lacks, and those fields' paths."""
    name = openapi.definition_name(res)
    if name is None or not isinstance(obj, dict):
        return obj, []
    defs = openapi.v2_document()["definitions"]
    pruned = copy.deepcopy(obj)
    found: list[str] = []
    _walk(defs[name], pruned, "", defs, found)
    return pruned, found


def directive(value: str | None) -> str:
    """The validation directive of a request; 400 for a value the apiserver does not know."""
    if value in (None, ""):
        return "Warn"
    if value not in DIRECTIVES:
        raise bad_request(f"fieldValidation parameter unsupported: {value}")
    return str(value)


def check(res: Resource, obj: Any, mode: str, warnings: list[str], context: str = "") -> Any:
    """``obj`` with unknown fields dropped; 400 under Strict, a warning each under Warn.

    ``context`` prefixes the Strict message the way the apiserver words decoding failures of a create or
    update body (``Pod in version "v1" cannot be handled as a Pod: ``)."""
    pruned, unknown = prune(res, obj)
    if not unknown:
        return pruned
    if mode == "Strict":
        listed = ", ".join(f'unknown field "{path}"' for path in unknown)
        raise bad_request(f"{context}strict decoding error: {listed}")
    if mode == "Warn":
        warnings.extend(f'unknown field "{path}"' for path in unknown)
    return pruned


def decoding_context(res: Resource) -> str:
    """How the apiserver introduces a body it could not decode into the kind."""
    return f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
