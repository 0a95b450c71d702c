"""OpenAPI 3.0 documents for one group version, derived from the swagger 2.0 paths and definitions.

The apiserver writes references with siblings (a description) as ``allOf: [{$ref}]`` in v3, puts bodies in
``requestBody`` and media types under ``content``; kubectl (>= 1.27) reads these for ``explain`` and for
strategic-merge patches in ``apply``.
"""

from __future__ import annotations

from typing import Any

from kubesim import openapi, resources
from kubesim.openapi import schemas

Obj = dict[str, Any]


def schema(value: Any) -> Any:
    """A v2 schema in v3 form: a ``$ref`` that has siblings moves into ``allOf``."""
    if isinstance(value, list):
        return [schema(v) for v in value]
    if not isinstance(value, dict):
        return value
    converted = {k: schema(v) if k in ("items", "additionalProperties") else v for k, v in value.items()}
    if "properties" in value:
        converted["properties"] = {k: schema(v) for k, v in value["properties"].items()}
    if "$ref" in converted and len(converted) > 1:
        ref = converted.pop("$ref")
        converted = {"allOf": [{"$ref": ref}], **converted}
    return converted


def _parameter(param: Obj) -> Obj:
    moved = {"type", "uniqueItems", "format", "items"}
    result = {k: v for k, v in param.items() if k not in moved}
    result["schema"] = {k: v for k, v in param.items() if k in moved}
    return result


def _operation(op: Obj) -> Obj:
    result = {k: v for k, v in op.items() if k not in ("consumes", "produces", "schemes", "parameters")}
    params = [p for p in op.get("parameters", []) if p.get("in") != "body"]
    if params:
        result["parameters"] = [_parameter(p) for p in params]
    for body in (p for p in op.get("parameters", []) if p.get("in") == "body"):
        media = op.get("consumes", ["*/*"])
        result["requestBody"] = {"content": {m: {"schema": body["schema"]} for m in media}, "required": True}
    responses: Obj = {}
    for code, response in op.get("responses", {}).items():
        responses[code] = {"description": response["description"]}
        if "schema" in response:
            responses[code]["content"] = {m: {"schema": response["schema"]} for m in op.get("produces", [])}
    result["responses"] = responses
    return result


def _path_item(item: Obj) -> Obj:
    converted: Obj = {verb: _operation(op) for verb, op in item.items() if verb != "parameters"}
    if item.get("parameters"):
        converted["parameters"] = [_parameter(p) for p in item["parameters"]]
    return converted


def document(members: list[resources.Resource]) -> Obj:
    """The OpenAPI 3.0 document of one group version's resources."""
    routes = {path: _path_item(item) for path, item in openapi.paths_for(members, schemas.V3_PREFIX).items()}
    named = schemas.references(routes, schemas.V3_PREFIX)
    defs = schemas.definitions(
        openapi.kubernetes_version(), openapi.served(members), schemas.V3_PREFIX, named
    )
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{openapi.kubernetes_version()}"},
        "paths": routes,
        "components": {
            "schemas": {name: schema(value) for name, value in defs.items()},
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                }
            },
        },
        "security": [{"BearerToken": []}],
    }
