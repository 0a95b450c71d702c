"""API semantics shared by the HTTP server and the controllers: CRUD, patches, deletion, admission.

What each verb means lives here; what it does per kind lives beside it: the defaults a new object gets
(`kubesim.defaults`), what an update may change (`kubesim.updates`) and what a DELETE does
(`kubesim.deletion`).
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable

import yaml

from kubesim import admission, deletion, podsecurity, priorityclasses, validation
from kubesim.defaults import apply_defaults
from kubesim.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    gone,
    invalid,
    not_found,
)
from kubesim.meta import now_iso, random_suffix
from kubesim.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from kubesim.resources import Resource
from kubesim.selectors import (
    SelectorError,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from kubesim.sidecars import SidecarInjector
from kubesim.store import Obj, Store, clone
from kubesim.updates import merge_update


class Api:
    """The object API over a Store: what a request means, independent of HTTP."""

    def __init__(self, store: Store):
        self.store = store
        self.event_lock = threading.Lock()
        self.after_write: list[Callable[[], None]] = []
        self.default_toleration_seconds = 300
        self.sidecars = SidecarInjector()

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
        if res.plural == "pods":  # a mutating webhook sees the pod before defaults and validation
            self.sidecars.mutate(obj, self.store.peek("namespaces", "", meta["namespace"]))
        apply_defaults(
            self.store, res.plural, obj, default_toleration_seconds=self.default_toleration_seconds
        )
        validation.validate(res.plural, res.kind, obj)
        with self.store.lock:
            self._check_namespace(res, meta.get("namespace"), meta["name"])
            if self.store.peek(res.plural, meta.get("namespace", ""), meta["name"]) is not None:
                raise already_exists(res.plural, meta["name"], res.group)
            if res.plural == "pods":
                self._admit_pod(obj)
            elif res.plural == "persistentvolumeclaims":
                self._admit_claim(obj)
            elif res.plural == priorityclasses.PLURAL:
                priorityclasses.check_default_unique(self.store, obj)
            if dry_run:
                return obj
            created = self.store.insert(res.plural, obj)
        self._notify()
        return created

    def _admit_pod(self, pod: Obj) -> None:
        ns = pod["metadata"]["namespace"]
        priorityclasses.admit_pod(self.store, pod)
        limit_ranges = self.store.list("limitranges", ns)[0]
        admission.apply_limit_ranges(pod, limit_ranges)
        admission.check_limit_range_max(pod, limit_ranges)
        pod["status"]["qosClass"] = validation.qos_class(pod["spec"])
        validation.validate("pods", "Pod", pod)
        podsecurity.admit(pod, self.store.peek("namespaces", "", ns))
        quotas = self.store.list("resourcequotas", ns)[0]
        if quotas:
            admission.check_quotas(pod, quotas, self.store.list("pods", ns)[0])

    def _admit_claim(self, claim: Obj) -> None:
        ns = claim["metadata"]["namespace"]
        quotas = self.store.list("resourcequotas", ns)[0]
        if quotas:
            admission.check_claim_quotas(claim, quotas, self.store.list("persistentvolumeclaims", ns)[0])

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
            result = merge_update(self.store, res, current, body, sub)
            return result if dry_run else self.write(res, result)

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
            result = merge_update(self.store, res, current, patched, sub)
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
            policy = deletion.propagation_policy(res, options)
            if options.get("dryRun"):
                return current
            if policy == "Orphan":
                deletion.orphan_dependents(self.store, current["metadata"]["uid"])
            result = deletion.delete_object(self.store, res, current, options, policy)
        self._notify()
        return result

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
    return invalid(
        res.kind, "", [(field, "FieldValueRequired", "name or generateName is required")], res.group
    )
