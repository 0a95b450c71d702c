"""What a DELETE does to an object: graceful pod termination, finalizers, namespaces, propagation.

The apiserver does not simply remove an object: a bound pod gets a deletionTimestamp at the end of its
grace period (its kubelet finishes the job), an object with finalizers waits for them (Foreground
propagation adds one), a namespace turns Terminating, and Orphan propagation strips owner references
from dependents. Each function here is called under the store's lock by `kubesim.api.Api.delete`.
"""

from __future__ import annotations

import time

from kubesim import admission, storageclasses
from kubesim.errors import bad_request
from kubesim.meta import now_iso
from kubesim.resources import Resource
from kubesim.store import Obj, Store, clone

FOREGROUND = "foregroundDeletion"


def propagation_policy(res: Resource, options: Obj) -> str:
    """The delete's propagationPolicy, from the options or the deprecated orphanDependents (a Job orphans
    its pods by default, as batch/v1 does); 400 for an unknown one."""
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    if policy is None:
        policy = "Orphan" if res.plural == "jobs" else "Background"
    if policy not in ("Orphan", "Background", "Foreground"):
        raise bad_request(f"propagationPolicy {policy!r} is not supported")
    return str(policy)


def delete_object(store: Store, res: Resource, obj: Obj, options: Obj, policy: str) -> Obj:
    """Start (or finish) deleting `obj`; returns what the API answers (the object, or a Status)."""
    meta = obj["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    if res.plural == "namespaces":
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_iso()
            meta["deletionGracePeriodSeconds"] = 0
            obj["status"] = {"phase": "Terminating"}
            return store.replace(res.plural, obj)
        return obj
    if res.plural == "pods":
        return _delete_pod(store, obj, options)
    finalizers = list(meta.get("finalizers") or [])
    if policy == "Foreground" and FOREGROUND not in finalizers:
        finalizers.append(FOREGROUND)
    if finalizers:
        if meta.get("deletionTimestamp") and meta.get("finalizers") == finalizers:
            return obj
        meta["finalizers"] = finalizers
        meta.setdefault("deletionTimestamp", now_iso())
        meta.setdefault("deletionGracePeriodSeconds", 0)
        return store.replace(res.plural, obj)
    removed = store.remove(res.plural, ns, name)
    if res.plural == storageclasses.PLURAL:
        return removed or obj  # its registry returns the deleted object (the client expects one)
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": res.group, "kind": res.plural, "uid": meta["uid"]},
    }


def _delete_pod(store: Store, obj: Obj, options: Obj) -> Obj:
    """Remove an unbound, finished or zero-grace pod at once; give any other a grace period to end."""
    meta = obj["metadata"]
    grace = options.get("gracePeriodSeconds")
    if grace is None:
        grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    immediate = (
        grace == 0
        or not (obj.get("spec") or {}).get("nodeName")
        or (obj.get("status") or {}).get("phase") in admission.TERMINAL
    )
    if immediate and not meta.get("finalizers"):
        return store.remove("pods", meta.get("namespace", ""), meta["name"]) or obj
    if not meta.get("deletionTimestamp") or grace < (meta.get("deletionGracePeriodSeconds") or 0):
        # As the apiserver's graceful delete: deletionTimestamp is when the grace period ends.
        grace = 0 if immediate else int(grace)
        meta["deletionTimestamp"] = now_iso(grace)
        meta["deletionGracePeriodSeconds"] = grace
        obj.setdefault("metadata", {})["annotations"] = {
            **(meta.get("annotations") or {}),
            "kubesim.io/deletion-deadline": str(time.time() + grace),
        }
        return store.replace("pods", obj)
    return obj


def orphan_dependents(store: Store, owner_uid: str) -> None:
    """Remove ownerReferences to ``owner_uid`` from every object (Orphan propagation)."""
    with store.lock:
        for plural in list(store._objects):
            for obj in list(store.list(plural)[0]):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    updated = clone(obj)
                    updated["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
                    if not updated["metadata"]["ownerReferences"]:
                        del updated["metadata"]["ownerReferences"]
                    store.replace(plural, updated)
