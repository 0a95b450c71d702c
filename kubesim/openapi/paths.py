"""The ``paths`` of kubesim's OpenAPI documents: one operation per endpoint a served resource answers.

Operations carry ``x-kubernetes-action`` and ``x-kubernetes-group-version-kind`` as the apiserver's do:
kubectl finds a kind's PATCH operation through them and reads its parameters to learn whether the server
supports ``fieldValidation`` (then it leaves schema validation to the server).
"""

from __future__ import annotations

from typing import Any

from kubesim.resources import Resource

Obj = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
# kubesim answers JSON only (no YAML or protobuf objects), and over plain HTTP.
_JSON = ["application/json"]
_PATCH_TYPES = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
]
_QUERY = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making these changes.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the request "
    "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore "
    "any unknown fields that are silently dropped from the object, and will ignore all but the last "
    "duplicate field that the decoder encounters. - Warn: This will send a warning via the standard warning "
    "response header for each unknown field that is dropped from the object, and for each duplicate field "
    "that is encountered. This is the default. - Strict: This will fail the request with a BadRequest error "
    "if any unknown fields would be dropped from the object, or if any duplicate fields are present.",
    "force": 'Force is going to "force" Apply requests. It means user will re-acquire conflicting fields '
    "owned by other people.",
    "labelSelector": "A selector to restrict the list of returned objects by their labels.",
    "fieldSelector": "A selector to restrict the list of returned objects by their fields.",
    "limit": "limit is a maximum number of responses to return for a list call.",
    "continue": "The continue option should be set when retrieving more results from the server.",
    "resourceVersion": "resourceVersion sets a constraint on what resource versions a request may be "
    "served from.",
    "watch": "Watch for changes to the described resources and return them as a stream of add, update, "
    "and remove notifications.",
    "gracePeriodSeconds": "The duration in seconds before the object should be deleted.",
    "propagationPolicy": "Whether and how garbage collection will be performed.",
    "container": "The container for which to stream logs.",
    "follow": "Follow the log stream of the pod.",
    "tailLines": "If set, the number of lines from the end of the logs to show.",
}
_TYPES = {"limit": "integer", "gracePeriodSeconds": "integer", "tailLines": "integer"}
_BOOLEANS = ("force", "watch", "follow")


def _query(name: str) -> Obj:
    kind = "boolean" if name in _BOOLEANS else _TYPES.get(name, "string")
    return {"uniqueItems": True, "type": kind, "description": _QUERY[name], "name": name, "in": "query"}


def _path_param(name: str, what: str) -> Obj:
    return {
        "uniqueItems": True,
        "type": "string",
        "description": what,
        "name": name,
        "in": "path",
        "required": True,
    }


def _body(ref: str) -> Obj:
    return {"name": "body", "in": "body", "required": True, "schema": {"$ref": ref}}


def _ok(ref: str | None, *codes: str) -> Obj:
    schema = {"schema": {"$ref": ref}} if ref else {"schema": {"type": "string"}}
    texts = {"200": "OK", "201": "Created", "202": "Accepted"}
    return {
        **{code: {"description": texts[code], **schema} for code in codes},
        "401": {"description": "Unauthorized"},
    }


def _group_word(res: Resource) -> str:
    if not res.group:
        return "CoreV1" if res.version == "v1" else f"Core{res.version.capitalize()}"
    first = res.group.split(".")[0]
    return first.capitalize() + res.version.capitalize()


def _tag(res: Resource) -> str:
    return f"{res.group.split('.')[0] if res.group else 'core'}_{res.version}"


class _Builder:
    """Operations for one resource, named and tagged as the apiserver names them."""

    def __init__(self, res: Resource, definition: str, prefix: str):
        self.res = res
        self.ref = prefix + definition
        self.list_ref = prefix + definition + "List"
        self.prefix = prefix
        self.gvk = {"group": res.group, "version": res.version, "kind": res.kind}
        self.word = _group_word(res)
        self.scope = "Namespaced" if res.namespaced else ""

    def op(self, verb: str, action: str, suffix: str, params: list[Obj], responses: Obj, **extra: Any) -> Obj:
        """One operation; ``extra`` may override the GVK (subresource bodies) or the media types."""
        gvk = extra.pop("gvk", self.gvk)
        what = f"{self.res.kind}{suffix}"
        return {
            "description": f"{verb} {what}",
            "consumes": extra.pop("consumes", ["*/*"]),
            "produces": extra.pop("produces", _JSON),
            "schemes": ["http"],
            "tags": [_tag(self.res)],
            "operationId": f"{verb}{self.word}{self.scope}{what}",
            "parameters": params,
            "responses": responses,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        }

    def writes(self, verb: str) -> list[Obj]:
        """Query parameters of create, replace and patch."""
        names = ["dryRun", "fieldManager", "fieldValidation"] + (["force"] if verb == "patch" else [])
        return [_query(n) for n in names]

    def collection(self) -> Obj:
        """GET (list), POST (create) and DELETE (deletecollection) on the collection."""
        reads = [
            _query(n)
            for n in ("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch")
        ]
        return {
            "get": self.op("list", "list", "", reads, _ok(self.list_ref, "200")),
            "post": self.op(
                "create",
                "post",
                "",
                [_body(self.ref), *self.writes("create")],
                _ok(self.ref, "200", "201", "202"),
            ),
            "delete": self.op(
                "delete",
                "deletecollection",
                "",
                [_body(self.prefix + META + "DeleteOptions"), *reads],
                _ok(self.prefix + META + "Status", "200"),
            ),
        }

    def item(self, suffix: str = "") -> Obj:
        """GET, PUT, PATCH (and DELETE on the object itself) on one object or its status."""
        item = {
            "get": self.op("read", "get", suffix, [], _ok(self.ref, "200")),
            "put": self.op(
                "replace",
                "put",
                suffix,
                [_body(self.ref), *self.writes("replace")],
                _ok(self.ref, "200", "201"),
            ),
            "patch": self.op(
                "patch",
                "patch",
                suffix,
                [_body(self.prefix + META + "Patch"), *self.writes("patch")],
                _ok(self.ref, "200", "201"),
                consumes=_PATCH_TYPES,
            ),
        }
        if not suffix:
            deleting = [
                _body(self.prefix + META + "DeleteOptions"),
                _query("dryRun"),
                _query("gracePeriodSeconds"),
                _query("propagationPolicy"),
            ]
            item["delete"] = self.op("delete", "delete", "", deleting, _ok(self.ref, "200", "202"))
        return item


def resource_paths(res: Resource, definition: str, prefix: str) -> dict[str, Obj]:
    """The paths of one stored resource (collection, object, subresources), keyed by URL template."""
    build = _Builder(res, definition, prefix)
    base = "/api/v1" if not res.group else f"/apis/{res.group}/{res.version}"
    where = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
    scope = (
        [_path_param("namespace", "object name and auth scope, such as for teams and projects")]
        if res.namespaced
        else []
    )
    named = [_path_param("name", f"name of the {res.kind}"), *scope]
    paths: dict[str, Obj] = {where: {**build.collection(), "parameters": scope}}
    if res.namespaced:
        everywhere = build.op("list", "list", "ForAllNamespaces", [], _ok(build.list_ref, "200"))
        everywhere["operationId"] = f"list{build.word}{res.kind}ForAllNamespaces"
        paths[f"{base}/{res.plural}"] = {"get": everywhere}
    paths[f"{where}/{{name}}"] = {**build.item(), "parameters": named}
    for sub in res.subresources:
        paths[f"{where}/{{name}}/{sub}"] = {**_subresource(build, sub), "parameters": named}
    return paths


def _subresource(build: _Builder, sub: str) -> Obj:
    if sub == "status":
        return build.item("Status")
    if sub == "log":
        reads = [_query(n) for n in ("container", "follow", "tailLines")]
        return {
            "get": build.op(
                "read", "get", "Log", reads, _ok(None, "200"), produces=["text/plain", "application/json"]
            )
        }
    if sub == "finalize":
        return {
            "put": build.op(
                "replace",
                "put",
                "Finalize",
                [_body(build.ref), *build.writes("replace")],
                _ok(build.ref, "200", "201"),
            )
        }
    body = {
        "binding": ("", "v1", "Binding", "io.k8s.api.core.v1.Binding"),
        "eviction": ("policy", "v1", "Eviction", "io.k8s.api.policy.v1.Eviction"),
    }[sub]
    gvk = {"group": body[0], "version": body[1], "kind": body[2]}
    ref = build.prefix + body[3]
    return {
        "post": build.op(
            "create",
            "post",
            body[2],
            [_body(ref), *build.writes("create")],
            _ok(ref, "200", "201", "202"),
            gvk=gvk,
        )
    }
