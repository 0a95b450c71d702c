"""meta.k8s.io/v1 Table renderings, so that ``kubectl get`` prints the columns it prints on a real cluster.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``; the apiserver answers with rows
of server-rendered cells. kubesim renders pods (NAME READY STATUS RESTARTS AGE, plus IP and NODE for
``-o wide``), nodes (NAME STATUS ROLES AGE VERSION), persistentvolumeclaims (NAME STATUS VOLUME CAPACITY
ACCESS MODES STORAGECLASS AGE), storageclasses (NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE
ALLOWVOLUMEEXPANSION AGE, the default's name followed by ``(default)``), priorityclasses (NAME VALUE
GLOBAL-DEFAULT AGE PREEMPTIONPOLICY) and NAME/AGE for every other kind.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubesim.storageclasses import is_default
from kubesim.store import Obj

_COLUMN = tuple[str, str, str, int]  # name, type, description, priority (1: only with -o wide)


def wants_table(accept: str | None) -> str | None:
    """The meta.k8s.io version of Table the client accepts (``v1`` or ``v1beta1``), or None."""
    for part in (accept or "").split(","):
        params = dict(p.strip().partition("=")[::2] for p in part.split(";")[1:])
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in ("v1", "v1beta1")
        ):
            return params["v"]
    return None


def human_age(created: str | None, now: datetime | None = None) -> str:
    """Age as kubectl prints it (``45s``, ``3m12s``, ``5h``, ``2d3h``...), from a creationTimestamp."""
    if not created:
        return "<unknown>"
    then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    if seconds < 0:
        return "0s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 730:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 2920 and days % 365 else f"{days // 365}y"


def _init_status(pod: Obj) -> str | None:
    """kubectl's STATUS while init containers run or after one failed (``Init:1/2``, ``Init:Error``,
    ``Init:CrashLoopBackOff``), or None once they have all completed."""
    st = pod.get("status") or {}
    total = len((pod.get("spec") or {}).get("initContainers") or [])
    for i, cs in enumerate(st.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting") or {}
        if terminated is not None and terminated.get("exitCode") == 0:
            continue
        if terminated is not None:
            return "Init:" + (terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
        if waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return "Init:" + waiting["reason"]
        return f"Init:{i}/{total}"
    return None


def _pod_status(pod: Obj) -> str:
    """The STATUS column: kubectl's printer logic in short (reason, init containers, waiting/terminated
    reason, phase)."""
    st = pod.get("status") or {}
    reason = st.get("reason") or st.get("phase") or "Unknown"
    initializing = _init_status(pod)
    if initializing is not None:
        if pod["metadata"].get("deletionTimestamp"):
            return "Terminating"
        return initializing
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if st.get("reason"):
        reason = st["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if st.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_row(pod: Obj) -> list[Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for cs in statuses if cs.get("ready"))
    if _init_status(pod) is not None:
        statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{total}",
        _pod_status(pod),
        restarts,
        human_age(pod["metadata"].get("creationTimestamp")),
        (pod.get("status") or {}).get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
    ]


def _node_row(node: Obj) -> list[Any]:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    status = "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in node["metadata"].get("labels") or {} if k.startswith(prefix))
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        status,
        ",".join(roles) or "<none>",
        human_age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        next(
            (
                a["address"]
                for a in (node.get("status") or {}).get("addresses") or []
                if a["type"] == "InternalIP"
            ),
            "<none>",
        ),
    ]


_ACCESS_MODES = {
    "ReadWriteOnce": "RWO",
    "ReadOnlyMany": "ROX",
    "ReadWriteMany": "RWX",
    "ReadWriteOncePod": "RWOP",
}


def _claim_row(claim: Obj) -> list[Any]:
    spec, st = claim.get("spec") or {}, claim.get("status") or {}
    phase = "Terminating" if claim["metadata"].get("deletionTimestamp") else st.get("phase", "Pending")
    modes = ",".join(_ACCESS_MODES.get(m, m) for m in st.get("accessModes") or [])
    return [
        claim["metadata"]["name"],
        phase,
        spec.get("volumeName", ""),
        (st.get("capacity") or {}).get("storage", ""),
        modes,
        spec.get("storageClassName") or "<unset>",
        spec.get("volumeAttributesClassName") or "<unset>",
        human_age(claim["metadata"].get("creationTimestamp")),
        spec.get("volumeMode", "Filesystem"),
    ]


def _class_row(storage_class: Obj) -> list[Any]:
    name = storage_class["metadata"]["name"]
    return [
        f"{name} (default)" if is_default(storage_class) else name,
        storage_class.get("provisioner", ""),
        storage_class.get("reclaimPolicy", "Delete"),
        storage_class.get("volumeBindingMode", "Immediate"),
        bool(storage_class.get("allowVolumeExpansion")),
        human_age(storage_class["metadata"].get("creationTimestamp")),
    ]


def _priority_class_row(priority_class: Obj) -> list[Any]:
    return [
        priority_class["metadata"]["name"],
        int(priority_class.get("value") or 0),
        bool(priority_class.get("globalDefault")),
        human_age(priority_class["metadata"].get("creationTimestamp")),
        priority_class.get("preemptionPolicy", "PreemptLowerPriority"),
    ]


def _generic_row(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], human_age(obj["metadata"].get("creationTimestamp"))]


_NAME: _COLUMN = ("Name", "string", "Name must be unique within a namespace.", 0)
_AGE: _COLUMN = ("Age", "string", "Time since the object was created (creationTimestamp).", 0)
_LAYOUTS: dict[str, tuple[list[_COLUMN], Callable[[Obj], list[Any]]]] = {
    "pods": (
        [
            _NAME,
            ("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
            ("Status", "string", "The aggregate status of the containers in this pod.", 0),
            ("Restarts", "string", "The number of times the containers in this pod have been restarted.", 0),
            _AGE,
            ("IP", "string", "IP address allocated to the pod.", 1),
            ("Node", "string", "Name of the node the pod is assigned to.", 1),
        ],
        _pod_row,
    ),
    "nodes": (
        [
            _NAME,
            ("Status", "string", "The status of the node.", 0),
            ("Roles", "string", "The roles of the node.", 0),
            _AGE,
            ("Version", "string", "Kubelet version reported by the node.", 0),
            ("Internal-IP", "string", "The node's internal IP address.", 1),
        ],
        _node_row,
    ),
    "persistentvolumeclaims": (
        [
            _NAME,
            ("Status", "string", "The phase of the claim (Terminating while it is being deleted).", 0),
            ("Volume", "string", "The volume bound to the claim.", 0),
            ("Capacity", "string", "The capacity of the bound volume.", 0),
            ("Access Modes", "string", "The access modes of the bound volume.", 0),
            ("StorageClass", "string", "The storage class of the claim.", 0),
            ("VolumeAttributesClass", "string", "The volume attributes class of the claim.", 1),
            _AGE,
            ("VolumeMode", "string", "Whether the volume is a filesystem or a raw block device.", 1),
        ],
        _claim_row,
    ),
    "storageclasses": (
        [
            _NAME,
            ("Provisioner", "string", "Indicates the type of the provisioner.", 0),
            ("ReclaimPolicy", "string", "Indicates the type of the reclaim policy.", 0),
            ("VolumeBindingMode", "string", "Indicates the mode of the volume binding.", 0),
            ("AllowVolumeExpansion", "string", "Indicates whether the storage class allow volume expand.", 0),
            _AGE,
        ],
        _class_row,
    ),
    "priorityclasses": (
        [
            _NAME,
            ("Value", "integer", "Value is the integer value of this priority class.", 0),
            (
                "Global-Default",
                "boolean",
                "GlobalDefault specifies whether this PriorityClass is the default.",
                0,
            ),
            _AGE,
            ("PreemptionPolicy", "string", "PreemptionPolicy is the policy for preempting pods.", 0),
        ],
        _priority_class_row,
    ),
}


def table(plural: str, items: list[Obj], version: str, include: str | None, list_meta: Obj) -> Obj:
    """A Table of ``items``; ``include`` is the ``includeObject`` parameter (None, Object, or the default
    PartialObjectMetadata, which kubectl needs for the NAMESPACE column of ``-A``)."""
    columns, render = _LAYOUTS.get(plural, ([_NAME, _AGE], _generic_row))
    rows = []
    for obj in items:
        row: Obj = {"cells": render(obj)}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"meta.k8s.io/{version}",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": list_meta,
        "columnDefinitions": [
            {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": d, "priority": p}
            for n, t, d, p in columns
        ],
        "rows": rows,
    }
