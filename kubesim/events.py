"""core/v1 Events recorded by the scheduler, kubelets and controllers, deduplicated like the apiserver's."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from kubesim.meta import now_iso
from kubesim.store import Obj, clone

if TYPE_CHECKING:
    from kubesim.api import Api


def record_event(api: Api, involved: Obj, type_: str, reason: str, message: str, component: str) -> None:
    """Create a core/v1 Event about ``involved``, or bump the count of the same (object, reason, message)."""
    meta = involved["metadata"]
    ns = meta.get("namespace") or "default"
    stamp = now_iso()
    with api.store.lock:
        if api.store.peek("namespaces", "", ns) is None:
            return
        for existing in api.store.list("events", ns)[0]:
            inv = existing.get("involvedObject") or {}
            if (
                inv.get("uid") == meta.get("uid")
                and existing.get("reason") == reason
                and (existing.get("message") == message)
            ):
                updated = clone(existing)
                updated["count"] = int(updated.get("count", 1)) + 1
                updated["lastTimestamp"] = stamp
                api.store.replace("events", updated)
                api._notify()
                return
        event = {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {
                "name": f"{meta['name']}.{time.time_ns():x}",
                "namespace": ns,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": stamp,
            },
            "involvedObject": {
                "kind": involved.get("kind"),
                "apiVersion": involved.get("apiVersion"),
                "namespace": meta.get("namespace", ""),
                "name": meta["name"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": None,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": "kubesim",
        }
        api.store.insert("events", event)
    api._notify()
