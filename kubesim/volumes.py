"""PersistentVolumeClaims as local folders, with the lifetime rules a cluster gives them.

There is no PersistentVolume object: the claim controller provisions each claim its StorageClass can serve
(``kubesim.storageclasses``) at once, binding it to a folder ``STATE/persistentvolumes/pvc-<uid>``
(``spec.volumeName``), as a dynamic provisioner with reclaim policy Delete would. A claim its class cannot
serve (no such class, an access mode the provisioner does not offer, no class at all) stays Pending with the
Event a real cluster records. The folder outlives the pods that mount it, and the
``kubernetes.io/pvc-protection`` finalizer keeps a deleted claim (and its data) until no scheduled,
unfinished pod uses it.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kubesim import resources
from kubesim.admission import TERMINAL
from kubesim.errors import invalid
from kubesim.storageclasses import (
    ACCESS_MODES,
    CONTROLLER,
    SELECTED_NODE,
    Refusal,
    default_class_name,
    provisioner_of,
    provisioning_refusal,
    waits_for_consumer,
)
from kubesim.store import Obj, Store

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

PVC_PROTECTION = "kubernetes.io/pvc-protection"
PLURAL = "persistentvolumeclaims"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
# How often an unprovisionable claim gets its Event again (the PV controller resyncs every 15 s).
REFUSAL_INTERVAL = 15.0


def volumes_root(state_dir: Path) -> Path:
    """Where the folders behind claims live."""
    return state_dir / "persistentvolumes"


def claim_folder(state_dir: Path, claim: Obj) -> Path:
    """The local folder of a bound claim."""
    return volumes_root(state_dir) / str(claim["spec"]["volumeName"])


def claim_names(pod: Obj) -> list[str]:
    """The claims a pod's volumes refer to, in spec order."""
    return [
        v["persistentVolumeClaim"].get("claimName", "")
        for v in (pod.get("spec") or {}).get("volumes") or []
        if "persistentVolumeClaim" in v
    ]


def claim_problem(store: Store, pod: Obj) -> str | None:
    """Why the pod cannot use its claims yet, in the scheduler's words, or None when all are usable."""
    namespace = pod["metadata"]["namespace"]
    for name in claim_names(pod):
        claim = store.peek(PLURAL, namespace, name)
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if claim["metadata"].get("deletionTimestamp"):
            return f'persistentvolumeclaim "{name}" is being deleted'
        if (claim.get("status") or {}).get("phase") != "Bound" and not waits_for_consumer(store, claim):
            return "pod has unbound immediate PersistentVolumeClaims"
    return None


def unbound_claims(store: Store, pod: Obj) -> list[Obj] | None:
    """The pod's claims that are not bound yet (WaitForFirstConsumer ones, once ``claim_problem`` passed),
    or None when one of its claims is gone."""
    namespace = pod["metadata"]["namespace"]
    claims = [store.peek(PLURAL, namespace, name) for name in claim_names(pod)]
    if any(c is None for c in claims):
        return None
    return [c for c in claims if c is not None and (c.get("status") or {}).get("phase") != "Bound"]


def default_claim(claim: Obj, default_class: str | None) -> None:
    """What the apiserver and its admission plugins set on a new claim: PVC protection, and the cluster's
    default class when ``storageClassName`` is unset (DefaultStorageClass; ``""`` stays: no class)."""
    spec = claim.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    if spec.get("storageClassName") is None and default_class:
        spec["storageClassName"] = default_class
    finalizers = claim["metadata"].setdefault("finalizers", [])
    if PVC_PROTECTION not in finalizers:
        finalizers.append(PVC_PROTECTION)
    claim["status"] = {"phase": "Pending"}


def keep_binding(current: Obj, new: Obj) -> None:
    """An update cannot unbind a claim: ``spec.volumeName`` stays (else its folder would be swept away)."""
    volume = (current.get("spec") or {}).get("volumeName")
    if volume:
        new.setdefault("spec", {})["volumeName"] = volume


def check_claim_update(current: Obj, new: Obj) -> None:
    """422 for an update that changes a claim's spec beyond what the apiserver allows: the volume name once,
    a class where there was none (retroactive default), a bound claim's requests (kubesim does not resize)
    and volumeAttributesClassName."""
    old_spec, new_spec = dict(current.get("spec") or {}), dict(new.get("spec") or {})
    new_spec.setdefault("volumeMode", "Filesystem")
    if not old_spec.get("volumeName"):
        old_spec["volumeName"] = new_spec.get("volumeName")
    if old_spec.get("storageClassName") is None:
        old_spec["storageClassName"] = new_spec.get("storageClassName")
    if (current.get("status") or {}).get("phase") == "Bound":
        old_spec["resources"] = {**(old_spec.get("resources") or {}), "requests": None}
        new_spec["resources"] = {**(new_spec.get("resources") or {}), "requests": None}
    old_spec.pop("volumeAttributesClassName", None)
    new_spec.pop("volumeAttributesClassName", None)
    if {k: v for k, v in old_spec.items() if v is not None} == {
        k: v for k, v in new_spec.items() if v is not None
    }:
        return
    message = (
        "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName "
        "for bound claims"
    )
    raise invalid(
        "PersistentVolumeClaim", current["metadata"]["name"], [("spec", "FieldValueForbidden", message)]
    )


def claim_causes(claim: Obj) -> list[tuple[str, str, str]]:
    """422 causes for a claim without access modes or a storage request, as the apiserver reports them."""
    spec = claim.get("spec") or {}
    causes = []
    modes = spec.get("accessModes") or []
    if not modes:
        causes.append(
            ("spec.accessModes", "FieldValueRequired", "Required value: at least 1 access mode is required")
        )
    for mode in modes:
        if mode not in ACCESS_MODES:
            supported = ", ".join(f'"{m}"' for m in sorted(ACCESS_MODES))
            message = f'Unsupported value: "{mode}": supported values: {supported}'
            causes.append(("spec.accessModes", "FieldValueNotSupported", message))
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        message = "Forbidden: may not use ReadWriteOncePod with other access modes"
        causes.append(("spec.accessModes", "FieldValueForbidden", message))
    if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
        causes.append(("spec.resources[storage]", "FieldValueRequired", "Required value"))
    return causes


class ClaimController:
    """Binds new claims to fresh folders, releases deleted ones once unused, and removes orphaned folders."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.refused: dict[str, tuple[str, float]] = {}

    def step(self) -> None:
        """One pass over all claims."""
        store = self.cluster.store
        claims = store.list(PLURAL)[0]
        in_use = {
            (pod["metadata"]["namespace"], name): str(pod["spec"]["nodeName"])
            for pod in store.list("pods")[0]
            if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") not in TERMINAL
            for name in claim_names(pod)
        }
        for claim in claims:
            meta = claim["metadata"]
            if meta.get("deletionTimestamp"):
                if (meta["namespace"], meta["name"]) not in in_use:
                    self._release(claim)
            elif (claim.get("status") or {}).get("phase") != "Bound":
                self._provision(claim, in_use.get((meta["namespace"], meta["name"])))
        live = {c["metadata"]["uid"] for c in claims}
        self.refused = {uid: seen for uid, seen in self.refused.items() if uid in live}
        self._sweep({str((c.get("spec") or {}).get("volumeName")) for c in store.list(PLURAL)[0]})

    def _provision(self, claim: Obj, user_node: str | None) -> None:
        """Give the claim the default class if it has none and one exists now (retroactive default class
        assignment), then bind it, or record why its class cannot serve it (again every 15 s). A claim of a
        WaitForFirstConsumer class waits for a node: the scheduler's pick (annotation
        ``volume.kubernetes.io/selected-node``), or that of a pod bound with ``spec.nodeName`` (``user_node``),
        which the PV controller writes into the annotation itself."""
        meta = claim["metadata"]
        store = self.cluster.store
        default = default_class_name(store)
        if (claim.get("spec") or {}).get("storageClassName") is None and default:

            def assign(c: Obj) -> None:
                c.setdefault("spec", {})["storageClassName"] = default

            self.cluster.api.mutate(PLURAL, meta["namespace"], meta["name"], assign)
            return
        annotations = meta.get("annotations") or {}
        if waits_for_consumer(store, claim) and SELECTED_NODE not in annotations:
            if user_node:

                def select(c: Obj) -> None:
                    c["metadata"].setdefault("annotations", {})[SELECTED_NODE] = user_node

                self.cluster.api.mutate(PLURAL, meta["namespace"], meta["name"], select)
                return
            message = "waiting for first consumer to be created before binding"
            self._refuse(claim, Refusal("Normal", "WaitForFirstConsumer", message, CONTROLLER))
            return
        refusal = provisioning_refusal(store, claim)
        if refusal is None:
            self.refused.pop(meta["uid"], None)
            self._bind(claim)
        else:
            self._refuse(claim, refusal)

    def _refuse(self, claim: Obj, refusal: Refusal) -> None:
        uid, now = claim["metadata"]["uid"], time.monotonic()
        message, at = self.refused.get(uid, ("", -1e9))
        if message == refusal.message and now - at < REFUSAL_INTERVAL:
            return
        self.refused[uid] = (refusal.message, now)
        self.cluster.api.record_event(claim, refusal.type, refusal.reason, refusal.message, refusal.component)

    def _bind(self, claim: Obj) -> None:
        meta = claim["metadata"]
        provisioner = provisioner_of(self.cluster.store, claim)
        volume = f"pvc-{meta['uid']}"
        folder = volumes_root(self.cluster.state_dir) / volume
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o777)  # as the local-path provisioner makes it: any runAsUser may write

        def apply(c: Obj) -> None:
            spec = c.setdefault("spec", {})
            spec["volumeName"] = volume
            storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
            c["status"] = {
                "phase": "Bound",
                "accessModes": list(spec.get("accessModes") or []),
                "capacity": {"storage": storage},
            }
            annotations = c["metadata"].setdefault("annotations", {})
            annotations["pv.kubernetes.io/bind-completed"] = "yes"
            annotations[STORAGE_PROVISIONER] = provisioner

        self.cluster.api.mutate(PLURAL, meta["namespace"], meta["name"], apply)
        self.cluster.api.record_event(
            claim,
            "Normal",
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {volume} (a kubesim folder)",
            f"{provisioner}_kubesim",
        )

    def _release(self, claim: Obj) -> None:
        meta = claim["metadata"]
        if PVC_PROTECTION not in (meta.get("finalizers") or []):
            return
        res = resources.find("", "v1", PLURAL)
        assert res is not None
        namespace, name = meta["namespace"], meta["name"]

        def drop(c: Obj) -> None:
            c["metadata"]["finalizers"] = [
                f for f in c["metadata"].get("finalizers") or [] if f != PVC_PROTECTION
            ]

        self.cluster.api.mutate(PLURAL, namespace, name, drop)
        current = self.cluster.store.get(PLURAL, namespace, name)
        if current is not None and not current["metadata"].get("finalizers"):
            self.cluster.api.write(res, current)

    def _sweep(self, live: set[str]) -> None:
        """Delete the folder of every claim that no longer exists (reclaim policy Delete)."""
        root = volumes_root(self.cluster.state_dir)
        if not root.is_dir():
            return
        for folder in root.iterdir():
            if folder.name not in live:
                shutil.rmtree(folder, ignore_errors=True)
