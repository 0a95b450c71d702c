"""What an update (PUT or PATCH) may change, per kind: the merge of the new body over the stored object.

Server-owned metadata is kept, status stays the status subresource's, and each kind's immutable fields
are enforced (a pod's spec but its images, deadline and tolerations; a Job's template and selector;
a claim's request and binding; a storage class's provisioner), as the apiserver's registries do.
"""

from __future__ import annotations

from kubesim import podsecurity, priorityclasses, storageclasses, validation, volumes
from kubesim.defaults import encode_string_data
from kubesim.errors import ApiError, invalid
from kubesim.resources import STATUS_SUBRESOURCE, Resource
from kubesim.store import Obj, Store, clone

# Metadata the server owns: an update's body can neither set nor drop these.
_SERVER_FIELDS = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "generateName",
)


def merge_update(store: Store, res: Resource, current: Obj, body: Obj, sub: str | None) -> Obj:
    """The object `body` makes of `current` (only its status for `sub == "status"`), checked and validated;
    raises `ApiError` for a change the kind forbids. Called under the store's lock; stores nothing."""
    if sub == "status":
        result = clone(current)
        result["status"] = clone(body.get("status") or {})
        return result
    result = clone(body)
    result["kind"], result["apiVersion"] = res.kind, res.api_version
    meta = result.setdefault("metadata", {})
    cur_meta = current["metadata"]
    for field in _SERVER_FIELDS:
        if field in cur_meta:
            meta[field] = cur_meta[field]
        else:
            meta.pop(field, None)
    meta["name"] = cur_meta["name"]
    if res.namespaced:
        meta["namespace"] = cur_meta["namespace"]
    if res.plural in STATUS_SUBRESOURCE:
        if "status" in current:
            result["status"] = clone(current["status"])
        else:
            result.pop("status", None)
    if res.plural == "namespaces":
        result["spec"] = clone(current.get("spec"))
    if res.plural == "pods":
        check_pod_update(current, result)
        podsecurity.admit(result, store.peek("namespaces", "", cur_meta["namespace"]), old=current)
    if res.plural == "jobs":
        check_job_update(current, result)
    if res.plural == "persistentvolumeclaims":
        volumes.check_claim_update(current, result)
        volumes.keep_binding(current, result)
    if res.plural == storageclasses.PLURAL:
        storageclasses.default_class(result)
        storageclasses.check_class_update(current, result)
    if res.plural == priorityclasses.PLURAL:
        priorityclasses.default_class(result)
        priorityclasses.check_class_update(current, result)
        priorityclasses.check_default_unique(store, result)
    if result.get("spec") != current.get("spec"):
        meta["generation"] = int(cur_meta.get("generation", 1)) + 1
    if res.plural == "secrets":
        encode_string_data(result)
    validation.validate(res.plural, res.kind, result)
    return result


def check_pod_update(current: Obj, new: Obj) -> None:
    """Refuse a pod update that changes its spec beyond images, the active deadline and tolerations."""
    old_spec, new_spec = clone(current.get("spec") or {}), clone(new.get("spec") or {})
    for spec in (old_spec, new_spec):
        for container in spec.get("containers") or []:
            container.pop("image", None)
        spec.pop("activeDeadlineSeconds", None)
        spec.pop("tolerations", None)
    if old_spec != new_spec:
        raise validation_invalid(
            "Pod",
            current["metadata"]["name"],
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
            "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations)",
        )


def check_job_update(current: Obj, new: Obj) -> None:
    """Refuse a Job update that changes its template, completions, completion mode or selector."""
    old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
    for field in ("template", "completions", "completionMode", "selector"):
        if old_spec.get(field) != new_spec.get(field):
            raise validation_invalid(
                "Job", current["metadata"]["name"], f"spec.{field}", "field is immutable", "batch"
            )


def validation_invalid(kind: str, name: str, field: str, message: str, group: str = "") -> ApiError:
    """422 for one invalid field."""
    return invalid(kind, name, [(field, "FieldValueInvalid", message)], group)
