"""API semantics shared by the HTTP server and the controllers: CRUD, patches, deletion, admission."""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import yaml

from kubesim import admission, podsecurity, storageclasses, validation, volumes
from kubesim.errors import ApiError, already_exists, bad_request, conflict, forbidden, gone, not_found
from kubesim.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from kubesim.resources import STATUS_SUBRESOURCE, Resource
from kubesim.selectors import (
    SelectorError,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from kubesim.store import Obj, Store, clone

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_iso(offset: float = 0.0) -> str:
    """The current time (plus ``offset`` seconds) as the apiserver writes timestamps (RFC 3339, seconds,
    UTC)."""
    return datetime.fromtimestamp(time.time() + offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(length: int = 5) -> str:
    """Random name suffix like the apiserver's generateName."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


class Api:
    """The object API over a Store: what a request means, independent of HTTP."""

    def __init__(self, store: Store):
        self.store = store
        self.event_lock = threading.Lock()
        self.after_write: list[Callable[[], None]] = []
        self.default_toleration_seconds = 300

    def _check_namespace(self, res: Resource, namespace: str | None, name: str) -> None:
        if not res.namespaced:
            return
        ns = self.store.peek("namespaces", "", namespace or "")
        if ns is None:
            raise not_found("namespaces", namespace or "")
        if ns["metadata"].get("deletionTimestamp"):
            raise forbidden(
                res.plural,
                name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
                res.group,
            )

    def create(self, res: Resource, namespace: str | None, body: Obj, *, dry_run: bool = False) -> Obj:
        """Create an object: name generation, defaults, validation, admission, then store (unless a dry run)."""
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        obj = clone(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise validation_required(res, "metadata.name")
            meta["name"] = meta["generateName"] + random_suffix()
        if res.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        obj["kind"] = res.kind
        obj["apiVersion"] = res.api_version
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta["generation"] = 1
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        self._default(res, obj)
        validation.validate(res.plural, res.kind, obj)
        with self.store.lock:
            self._check_namespace(res, meta.get("namespace"), meta["name"])
            if self.store.peek(res.plural, meta.get("namespace", ""), meta["name"]) is not None:
                raise already_exists(res.plural, meta["name"], res.group)
            if res.plural == "pods":
                self._admit_pod(obj)
            if dry_run:
                return obj
            created = self.store.insert(res.plural, obj)
        self._notify()
        return created

    def _default(self, res: Resource, obj: Obj) -> None:
        if res.plural == "pods":
            validation.default_pod(obj, self.default_toleration_seconds)
        elif res.plural == "jobs":
            validation.default_job(obj)
        elif res.plural == "namespaces":
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            labels = obj["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        elif res.plural == "services":
            self._default_service(obj)
        elif res.plural == "secrets":
            obj.setdefault("type", "Opaque")
            for key, value in (obj.pop("stringData", None) or {}).items():
                obj.setdefault("data", {})[key] = base64.b64encode(str(value).encode()).decode()
        elif res.plural == "resourcequotas":
            obj["status"] = {"hard": dict((obj.get("spec") or {}).get("hard") or {}), "used": {}}
        elif res.plural == "persistentvolumeclaims":
            volumes.default_claim(obj, storageclasses.default_class_name(self.store))
        elif res.plural == storageclasses.PLURAL:
            storageclasses.default_class(obj)

    def _default_service(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("clusterIP") in (None, ""):
            with self.store.lock:
                used = {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("services")[0]}
                for n in range(1, 65000):
                    candidate = f"10.96.{n // 250}.{n % 250 + 1}"
                    if candidate not in used:
                        spec["clusterIP"] = candidate
                        break
        spec["clusterIPs"] = [spec["clusterIP"]]
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj["status"] = {"loadBalancer": {}}

    def _admit_pod(self, pod: Obj) -> None:
        ns = pod["metadata"]["namespace"]
        limit_ranges = self.store.list("limitranges", ns)[0]
        admission.apply_limit_ranges(pod, limit_ranges)
        admission.check_limit_range_max(pod, limit_ranges)
        pod["status"]["qosClass"] = validation.qos_class(pod["spec"])
        validation.validate("pods", "Pod", pod)
        podsecurity.admit(pod, self.store.peek("namespaces", "", ns))
        quotas = self.store.list("resourcequotas", ns)[0]
        if quotas:
            admission.check_quotas(pod, quotas, self.store.list("pods", ns)[0])

    def get(self, res: Resource, namespace: str | None, name: str) -> Obj:
        """One object, or 404."""
        obj = self.store.get(res.plural, namespace or "" if res.namespaced else "", name)
        if obj is None:
            raise not_found(res.plural, name, res.group)
        return obj

    def list(
        self,
        res: Resource,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[list[Obj], int, str | None, int | None]:
        """Matching objects (read-only), the list's resourceVersion, a continue token and remaining count."""
        try:
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector, res.plural)
        except SelectorError as exc:
            raise bad_request(str(exc)) from None
        items, rv = self.store.list(res.plural, namespace if res.namespaced else None)
        matched = [
            o for o in items if labels_match(labels, o["metadata"].get("labels")) and fields_match(fields, o)
        ]
        if continue_token:
            try:
                start = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                after = (start["ns"], start["name"])
            except (ValueError, KeyError, TypeError):
                raise bad_request("invalid continue token") from None
            if start.get("rv", 0) < self.store.compacted_through:
                raise gone("The provided continue parameter is too old to display a consistent list result.")
            matched = [
                o for o in matched if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after
            ]
        if limit and limit > 0 and len(matched) > limit:
            last = matched[limit - 1]["metadata"]
            token = json.dumps({"rv": rv, "ns": last.get("namespace", ""), "name": last["name"]})
            remaining = len(matched) - limit
            return matched[:limit], rv, base64.urlsafe_b64encode(token.encode()).decode(), remaining
        return matched, rv, None, None

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Obj,
        sub: str | None = None,
        *,
        dry_run: bool = False,
    ) -> Obj:
        """PUT: replace spec/metadata (or only status for ``/status``), checking resourceVersion."""
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise bad_request("the body of the request was in an unknown format")
        ns = namespace or "" if res.namespaced else ""
        with self.store.lock:
            current = self.store.peek(res.plural, ns, name)
            if current is None:
                raise not_found(res.plural, name, res.group)
            meta = body.get("metadata") or {}
            if meta.get("name") and meta["name"] != name:
                raise bad_request(
                    f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
                )
            wanted_rv = meta.get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise conflict(res.plural, name, res.group)
            result = self._merge_update(res, current, body, sub)
            return result if dry_run else self.write(res, result)

    def _merge_update(self, res: Resource, current: Obj, body: Obj, sub: str | None) -> Obj:
        if sub == "status":
            result = clone(current)
            result["status"] = clone(body.get("status") or {})
            return result
        result = clone(body)
        result["kind"], result["apiVersion"] = res.kind, res.api_version
        meta = result.setdefault("metadata", {})
        cur_meta = current["metadata"]
        for field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "generateName",
        ):
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
            self._check_pod_update(current, result)
            podsecurity.admit(result, self.store.peek("namespaces", "", cur_meta["namespace"]), old=current)
        if res.plural == "jobs":
            self._check_job_update(current, result)
        if res.plural == "persistentvolumeclaims":
            volumes.check_claim_update(current, result)
            volumes.keep_binding(current, result)
        if res.plural == storageclasses.PLURAL:
            storageclasses.default_class(result)
            storageclasses.check_class_update(current, result)
        if result.get("spec") != current.get("spec"):
            meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        if res.plural == "secrets":
            for key, value in (result.pop("stringData", None) or {}).items():
                result.setdefault("data", {})[key] = base64.b64encode(str(value).encode()).decode()
        validation.validate(res.plural, res.kind, result)
        return result

    def _check_pod_update(self, current: Obj, new: Obj) -> None:
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

    def _check_job_update(self, current: Obj, new: Obj) -> None:
        old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
        for field in ("template", "completions", "completionMode", "selector"):
            if old_spec.get(field) != new_spec.get(field):
                raise validation_invalid(
                    "Job", current["metadata"]["name"], f"spec.{field}", "field is immutable", "batch"
                )

    def write(self, res: Resource, obj: Obj) -> Obj:
        """Store a new version of an existing object; finish a deletion whose finalizers are all gone."""
        with self.store.lock:
            meta = obj["metadata"]
            if (
                meta.get("deletionTimestamp")
                and not meta.get("finalizers")
                and res.plural
                not in (
                    "pods",
                    "namespaces",
                )
            ):
                self.store.remove(res.plural, meta.get("namespace", ""), meta["name"])
                self._notify()
                return obj
            stored = self.store.replace(res.plural, obj)
        self._notify()
        return stored

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        content_type: str,
        raw: bytes,
        sub: str | None = None,
        *,
        check: Callable[[Obj], Obj] | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PATCH with merge, strategic-merge, JSON or apply (treated as merge, creating if absent) patches;
        ``check`` sees the patched object first (server-side field validation)."""
        kind = content_type.split(";")[0].strip()
        try:
            if kind == "application/apply-patch+yaml":
                body = yaml.safe_load(raw.decode() or "{}")
            else:
                body = json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError):
            raise bad_request("the body of the request was in an unknown format") from None
        ns = namespace or "" if res.namespaced else ""
        with self.store.lock:
            current = self.store.peek(res.plural, ns, name)
            if current is None:
                if kind == "application/apply-patch+yaml" and sub is None:
                    return self.create(res, namespace, check(body) if check else body, dry_run=dry_run)
                raise not_found(res.plural, name, res.group)
            try:
                if kind == "application/json-patch+json":
                    patched = json_patch(current, body)
                elif kind == "application/merge-patch+json":
                    patched = merge_patch(current, body)
                elif (
                    kind == "application/strategic-merge-patch+json" or kind == "application/apply-patch+yaml"
                ):
                    patched = strategic_merge_patch(current, body)
                else:
                    raise ApiError(415, "UnsupportedMediaType", f"the media type {kind!r} is not supported")
            except PatchError as exc:
                raise bad_request(str(exc)) from None
            if not isinstance(patched, dict):
                raise bad_request("the patch did not produce an object")
            if check is not None:
                patched = check(patched)
            wanted_rv = (patched.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
                raise conflict(res.plural, name, res.group)
            patched.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
            result = self._merge_update(res, current, patched, sub)
            return result if dry_run else self.write(res, result)

    def delete(self, res: Resource, namespace: str | None, name: str, options: Obj | None) -> Obj:
        """DELETE honouring grace periods, finalizers, preconditions and propagationPolicy (and
        ``dryRun: [All]`` in the options: checked, not done)."""
        options = options or {}
        ns = namespace or "" if res.namespaced else ""
        with self.store.lock:
            current = self.store.get(res.plural, ns, name)
            if current is None:
                raise not_found(res.plural, name, res.group)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
                raise conflict(res.plural, name, res.group)
            if (
                pre.get("resourceVersion")
                and pre["resourceVersion"] != current["metadata"]["resourceVersion"]
            ):
                raise conflict(res.plural, name, res.group)
            policy = options.get("propagationPolicy")
            if policy is None and options.get("orphanDependents") is not None:
                policy = "Orphan" if options["orphanDependents"] else "Background"
            if policy is None:
                policy = "Orphan" if res.plural == "jobs" else "Background"
            if policy not in ("Orphan", "Background", "Foreground"):
                raise bad_request(f"propagationPolicy {policy!r} is not supported")
            if options.get("dryRun"):
                return current
            if policy == "Orphan":
                self.orphan_dependents(current["metadata"]["uid"])
            result = self._delete_object(res, current, options, policy)
        self._notify()
        return result

    def _delete_object(self, res: Resource, obj: Obj, options: Obj, policy: str) -> Obj:
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        if res.plural == "namespaces":
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_iso()
                meta["deletionGracePeriodSeconds"] = 0
                obj["status"] = {"phase": "Terminating"}
                return self.store.replace(res.plural, obj)
            return obj
        if res.plural == "pods":
            grace = options.get("gracePeriodSeconds")
            if grace is None:
                grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            immediate = (
                grace == 0
                or not (obj.get("spec") or {}).get("nodeName")
                or (obj.get("status") or {}).get("phase") in admission.TERMINAL
            )
            if immediate and not meta.get("finalizers"):
                return self.store.remove("pods", ns, name) or obj
            if not meta.get("deletionTimestamp") or grace < (meta.get("deletionGracePeriodSeconds") or 0):
                # As the apiserver's graceful delete: deletionTimestamp is when the grace period ends.
                grace = 0 if immediate else int(grace)
                meta["deletionTimestamp"] = now_iso(grace)
                meta["deletionGracePeriodSeconds"] = grace
                obj.setdefault("metadata", {})["annotations"] = {
                    **(meta.get("annotations") or {}),
                    "kubesim.io/deletion-deadline": str(time.time() + grace),
                }
                return self.store.replace("pods", obj)
            return obj
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if finalizers:
            if meta.get("deletionTimestamp") and meta.get("finalizers") == finalizers:
                return obj
            meta["finalizers"] = finalizers
            meta.setdefault("deletionTimestamp", now_iso())
            meta.setdefault("deletionGracePeriodSeconds", 0)
            return self.store.replace(res.plural, obj)
        removed = self.store.remove(res.plural, ns, name)
        if res.plural == storageclasses.PLURAL:
            return removed or obj  # its registry returns the deleted object (the client expects one)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": res.group, "kind": res.plural, "uid": meta["uid"]},
        }

    def orphan_dependents(self, owner_uid: str) -> None:
        """Remove ownerReferences to ``owner_uid`` from every object (Orphan propagation)."""
        with self.store.lock:
            for plural in list(self.store._objects):
                for obj in list(self.store.list(plural)[0]):
                    refs = obj["metadata"].get("ownerReferences") or []
                    if any(r.get("uid") == owner_uid for r in refs):
                        updated = clone(obj)
                        updated["metadata"]["ownerReferences"] = [
                            r for r in refs if r.get("uid") != owner_uid
                        ]
                        if not updated["metadata"]["ownerReferences"]:
                            del updated["metadata"]["ownerReferences"]
                        self.store.replace(plural, updated)

    def mutate(self, plural: str, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj | None:
        """Atomically apply ``change`` to a copy of an object and store it if it changed (for controllers)."""
        with self.store.lock:
            current = self.store.peek(plural, namespace, name)
            if current is None:
                return None
            updated = clone(current)
            change(updated)
            if updated == current:
                return current
            stored = self.store.replace(plural, updated)
        self._notify()
        return stored

    def record_event(self, involved: Obj, type_: str, reason: str, message: str, component: str) -> None:
        """Create (or bump the count of) a core/v1 Event about ``involved``."""
        from kubesim.events import record_event

        record_event(self, involved, type_, reason, message, component)

    def _notify(self) -> None:
        for hook in self.after_write:
            hook()


def validation_required(res: Resource, field: str) -> ApiError:
    """422 for a missing required field."""
    from kubesim.errors import invalid

    return invalid(
        res.kind, "", [(field, "FieldValueRequired", "name or generateName is required")], res.group
    )


def validation_invalid(kind: str, name: str, field: str, message: str, group: str = "") -> ApiError:
    """422 for one invalid field."""
    from kubesim.errors import invalid

    return invalid(kind, name, [(field, "FieldValueInvalid", message)], group)
