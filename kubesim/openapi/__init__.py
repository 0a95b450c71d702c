"""OpenAPI documents describing what kubesim serves: ``/openapi/v2`` (JSON or gnostic protobuf) and
``/openapi/v3`` (discovery plus one document per group version), built once per process.

kubectl needs them: ``apply`` validates manifests against the v2 definitions (or, when the v3 document
says a PATCH takes ``fieldValidation``, leaves that to the server) and ``explain`` prints their field
descriptions. The schemas come from kubernetes-validate's packaged copy of the release kubesim claims to be.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubesim import resources
from kubesim.errors import ApiError
from kubesim.openapi import gnostic, paths, schemas

if TYPE_CHECKING:
    from kubesim.server import Handler

Obj = dict[str, Any]

# The Accept values that ask for the v2 document as protobuf.
PROTOBUF_TYPES = (
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
)
_SECURITY_DEFINITIONS = {
    "BearerToken": {
        "description": "Bearer Token authentication",
        "type": "apiKey",
        "name": "authorization",
        "in": "header",
    }
}


@dataclass(frozen=True)
class Rendered:
    """A document ready to send: its bytes, content type and an ETag derived from its content."""

    body: bytes
    content_type: str
    etag: str


def _render(body: bytes, content_type: str) -> Rendered:
    return Rendered(body, content_type, '"' + hashlib.sha512(body).hexdigest()[:32].upper() + '"')


def kubernetes_version() -> str:
    """The release whose schemas kubesim publishes: the one ``/version`` reports (``1.32.0``)."""
    from kubesim.server import VERSION_INFO

    return f"{VERSION_INFO['major']}.{VERSION_INFO['minor']}.0"


def _stored() -> list[resources.Resource]:
    """Stored resources with a packaged schema (custom resources such as ProvisioningRequest have none)."""
    return [r for r in resources.RESOURCES if r.stored and definition_name(r) is not None]


def served(members: list[resources.Resource]) -> list[tuple[str, str, str]]:
    """The (group, version, kind) of each resource."""
    return [(r.group, r.version, r.kind) for r in members]


@functools.cache
def _definition_names() -> dict[tuple[str, str, str], str]:
    found: dict[tuple[str, str, str], str] = {}
    for name, schema in schemas.source_definitions(kubernetes_version()).items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            found.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
    return found


def definition_name(res: resources.Resource) -> str | None:
    """The definition describing a resource's kind (None for kinds without a packaged schema)."""
    return _definition_names().get((res.group, res.version, res.kind))


def paths_for(members: list[resources.Resource], prefix: str) -> Obj:
    """The paths of the given resources, references under ``prefix``."""
    names = _definition_names()
    result: Obj = {}
    for res in members:
        result.update(paths.resource_paths(res, names[(res.group, res.version, res.kind)], prefix))
    return result


@functools.cache
def v2_document() -> Obj:
    """The swagger 2.0 document: paths of every stored resource, definitions of their kinds and types."""
    routes = paths_for(_stored(), schemas.V2_PREFIX)
    named = schemas.references(routes, schemas.V2_PREFIX)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": f"v{kubernetes_version()}"},
        "paths": routes,
        "definitions": schemas.definitions(kubernetes_version(), served(_stored()), schemas.V2_PREFIX, named),
        "securityDefinitions": _SECURITY_DEFINITIONS,
        "security": [{"BearerToken": []}],
    }


@functools.cache
def v2_json() -> Rendered:
    """``/openapi/v2`` as JSON."""
    return _render(json.dumps(v2_document(), separators=(",", ":")).encode(), "application/json")


@functools.cache
def v2_protobuf() -> Rendered:
    """``/openapi/v2`` as gnostic's ``openapi.v2.Document`` protobuf."""
    return _render(gnostic.document(v2_document()), gnostic.PROTOBUF_CONTENT_TYPE)


def wants_protobuf(accept: str | None) -> bool:
    """Whether an Accept header asks for the v2 protobuf (kubectl and client-go do)."""
    return any(kind in (accept or "") for kind in PROTOBUF_TYPES)


def _group_versions() -> dict[str, list[resources.Resource]]:
    grouped: dict[str, list[resources.Resource]] = {}
    for res in _stored():
        key = f"apis/{res.group}/{res.version}" if res.group else f"api/{res.version}"
        grouped.setdefault(key, []).append(res)
    return grouped


@functools.cache
def v3_documents() -> dict[str, Rendered]:
    """One OpenAPI 3.0 document per served group version, keyed by ``api/v1``, ``apis/batch/v1``..."""
    from kubesim.openapi import v3

    return {
        key: _render(json.dumps(v3.document(members), separators=(",", ":")).encode(), "application/json")
        for key, members in _group_versions().items()
    }


@functools.cache
def v3_discovery() -> Rendered:
    """``/openapi/v3``: where each group version's document is, with a hash of its content."""
    listing = {
        key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={doc.etag.strip(chr(34))}"}
        for key, doc in v3_documents().items()
    }
    return _render(json.dumps({"paths": listing}, separators=(",", ":")).encode(), "application/json")


def serve(handler: Handler, method: str, path: str) -> None:
    """Answer a request under ``/openapi/`` or ``/swagger-2.0.0.pb-v1``."""
    if method != "GET":
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
    if path == "/openapi/v2":
        doc = v2_protobuf() if wants_protobuf(handler.headers.get("Accept")) else v2_json()
    elif path == "/swagger-2.0.0.pb-v1":
        doc = v2_protobuf()
    elif path == "/openapi/v3":
        doc = v3_discovery()
    else:
        found = v3_documents().get(path.removeprefix("/openapi/v3/"))
        if found is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        doc = found
    fresh = handler.headers.get("If-None-Match") == doc.etag
    handler.send_response(304 if fresh else 200)
    handler.send_header("Content-Type", doc.content_type)
    handler.send_header("ETag", doc.etag)
    handler.send_header("Content-Length", "0" if fresh else str(len(doc.body)))
    handler.end_headers()
    if not fresh:
        handler.wfile.write(doc.body)
