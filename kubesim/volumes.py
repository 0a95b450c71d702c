"""PersistentVolumeClaims as local folders, with the lifetime rules a cluster gives them.

There is no PersistentVolume object or provisioner: the claim controller binds every claim at once to a folder
``STATE/persistentvolumes/pvc-<uid>`` (``spec.volumeName``), as a dynamic provisioner with reclaim policy
Delete would. The folder outlives the pods that mount it, and the ``kubernetes.io/pvc-protection`` finalizer
keeps a deleted claim (and its data) until no scheduled, unfinished pod uses it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from kubesim import resources
from kubesim.admission import TERMINAL
from kubesim.store import Obj, Store

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

PVC_PROTECTION = "kubernetes.io/pvc-protection"
PLURAL = "persistentvolumeclaims"


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
        if (claim.get("status") or {}).get("phase") != "Bound":
            return "pod has unbound immediate PersistentVolumeClaims"
    return None


def default_claim(claim: Obj) -> None:
    """What the apiserver (and its PVC protection admission plugin) sets on a new claim."""
    spec = claim.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    finalizers = claim["metadata"].setdefault("finalizers", [])
    if PVC_PROTECTION not in finalizers:
        finalizers.append(PVC_PROTECTION)
    claim["status"] = {"phase": "Pending"}


def keep_binding(current: Obj, new: Obj) -> None:
    """An update cannot unbind a claim: ``spec.volumeName`` stays (else its folder would be swept away)."""
    volume = (current.get("spec") or {}).get("volumeName")
    if volume:
        new.setdefault("spec", {})["volumeName"] = volume


def claim_causes(claim: Obj) -> list[tuple[str, str, str]]:
    """422 causes for a claim without access modes or a storage request, as the apiserver reports them."""
    spec = claim.get("spec") or {}
    causes = []
    if not spec.get("accessModes"):
        causes.append(
            ("spec.accessModes", "FieldValueRequired", "Required value: at least 1 access mode is required")
        )
    if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
        causes.append(("spec.resources[storage]", "FieldValueRequired", "Required value"))
    return causes


class ClaimController:
    """Binds new claims to fresh folders, releases deleted ones once unused, and removes orphaned folders."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def step(self) -> None:
        """One pass over all claims."""
        store = self.cluster.store
        claims = store.list(PLURAL)[0]
        in_use = {
            (pod["metadata"]["namespace"], name)
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
                self._bind(claim)
        self._sweep({str((c.get("spec") or {}).get("volumeName")) for c in store.list(PLURAL)[0]})

    def _bind(self, claim: Obj) -> None:
        meta = claim["metadata"]
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
            c["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"

        self.cluster.api.mutate(PLURAL, meta["namespace"], meta["name"], apply)
        self.cluster.api.record_event(
            claim,
            "Normal",
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {volume} (a kubesim folder)",
            "kubesim-provisioner",
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
