"""Checks an API response against the OpenAPI schema the server publishes at `/api/schema/`.

The schema is generated from the views' serializers; the check is what keeps the two honest: every response
the in-process test clients receive from a documented API view (tests/conftest.py wires it in) must have a
status code its operation documents, a documented content type, and, for JSON, a body the documented schema
accepts. Bodies are validated with openapi-schema-validator's OAS 3.0 read validator (jsonschema plus the
OpenAPI keywords: `nullable`, `readOnly`), `$ref`s resolved through a referencing registry holding the whole
schema document.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.urls import Resolver404, resolve
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from jsonschema.exceptions import best_match
from openapi_schema_validator import OAS30ReadValidator, oas30_format_checker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4
from rest_framework.views import APIView

SCHEMA_URI = "urn:trainyard:openapi"


class SchemaDrift(AssertionError):
    """A response the OpenAPI schema does not describe."""


@functools.cache
def api_schema() -> dict[str, Any]:
    """The schema `/api/schema/` serves, as plain JSON data (generated once per test session)."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    return dict(json.loads(OpenApiJsonRenderer().render(document)))


@functools.cache
def _registry() -> Registry[Any]:
    resource = Resource.from_contents(api_schema(), default_specification=DRAFT4)
    return Registry().with_resource(SCHEMA_URI, resource)


def _pointer(*parts: str) -> str:
    """A `$ref` into the schema document (RFC 6901 escapes: `~` as `~0`, `/` as `~1`)."""
    return SCHEMA_URI + "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def schema_path(path_info: str) -> str | None:
    """The schema's path template for a request path (`/api/v1/jobs/{job_id}/`), or None when no DRF view
    answers it (an unknown path, or the plain Django views learner pods call, which the schema leaves out)."""
    try:
        match = resolve(path_info)
    except Resolver404:
        return None
    view = getattr(match.func, "cls", None)
    if not (isinstance(view, type) and issubclass(view, APIView)):
        return None
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", match.route)


def check_response(method: str, path_info: str, response: HttpResponseBase) -> None:
    """Raise SchemaDrift unless the schema documents this response of the API view at `path_info`."""
    template = schema_path(path_info)
    if template is None:
        return
    body = response.content if isinstance(response, HttpResponse) else b""  # a file or a stream: not read
    content_type = (response.get("Content-Type") or "").split(";")[0].strip()
    check_body(method, template, response.status_code, content_type, body, label=path_info)


def check_body(
    method: str, template: str, status: int, content_type: str, body: bytes, label: str | None = None
) -> None:
    """Raise SchemaDrift unless the operation `method template` documents `status` with this body."""
    where = f"{method.upper()} {label or template} answered {status}"
    operation = api_schema()["paths"].get(template, {}).get(method.lower())
    if operation is None:
        raise SchemaDrift(f"{where}: the schema has no operation {method.upper()} {template}")
    code = str(status)
    documented = operation["responses"].get(code)
    if documented is None:
        raise SchemaDrift(
            f"{where}: status {code} is not documented (only {', '.join(operation['responses'])})"
        )
    contents = documented.get("content", {})
    if not contents:
        if body:
            raise SchemaDrift(f"{where}: the schema documents no body, the response has {len(body)} bytes")
        return
    if content_type not in contents:
        raise SchemaDrift(
            f"{where}: content type {content_type!r} is not documented (only {', '.join(contents)})"
        )
    if content_type != "application/json":
        return  # files and archives: the schema says only "binary"
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise SchemaDrift(f"{where}: the body is not JSON ({exc}): {body[:200]!r}") from None
    pointer = _pointer(
        "paths", template, method.lower(), "responses", code, "content", content_type, "schema"
    )
    validator = OAS30ReadValidator(
        {"$ref": pointer}, registry=_registry(), format_checker=oas30_format_checker
    )
    error = best_match(validator.iter_errors(data))
    if error is not None:
        raise SchemaDrift(
            f"{where}: the body does not match the schema at {error.json_path}: {error.message}\n"
            f"body: {json.dumps(data)[:1000]}"
        )
