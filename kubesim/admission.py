"""Admission: LimitRange defaults and ResourceQuota checks on pod and PersistentVolumeClaim creation, and quota
usage accounting."""

from __future__ import annotations

import time
from datetime import datetime
from decimal import Decimal
from typing import Any

from kubesim.errors import forbidden
from kubesim.quantity import QuantityError, format_amount, parse_quantity

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
# Quota keys only claims count against (the apiserver's PVC evaluator); a pod need not specify them.
_CLASS_SCOPED = ".storageclass.storage.k8s.io/"


def _amounts(container: Obj, section: str) -> dict[str, Decimal]:
    amounts: dict[str, Decimal] = {}
    for res, value in ((container.get("resources") or {}).get(section) or {}).items():
        try:
            amounts[res] = parse_quantity(value)
        except QuantityError:
            continue
    return amounts


def _sum(pod: Obj, section: str) -> dict[str, Decimal]:
    """The pod's effective amounts: its containers and native sidecars (init containers with restartPolicy
    Always) summed, and at least what each other init container needs beside the sidecars started before it,
    as the kubelet and scheduler count them."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    peaks: list[dict[str, Decimal]] = []
    for container in spec.get("initContainers") or []:
        amounts = _amounts(container, section)
        if container.get("restartPolicy") == "Always":
            for res, value in amounts.items():
                sidecars[res] = sidecars.get(res, Decimal(0)) + value
        else:
            peaks.append(
                {r: amounts.get(r, Decimal(0)) + sidecars.get(r, Decimal(0)) for r in {*amounts, *sidecars}}
            )
    for container in spec.get("containers") or []:
        for res, value in _amounts(container, section).items():
            total[res] = total.get(res, Decimal(0)) + value
    for res, value in sidecars.items():
        total[res] = total.get(res, Decimal(0)) + value
    for peak in peaks:
        for res, value in peak.items():
            total[res] = max(total.get(res, Decimal(0)), value)
    return total


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """Effective requests of a pod: sum over containers, at least the largest init container."""
    return _sum(pod, "requests")


def pod_limits(pod: Obj) -> dict[str, Decimal]:
    """Effective limits of a pod."""
    return _sum(pod, "limits")


def apply_limit_ranges(pod: Obj, limit_ranges: list[Obj]) -> None:
    """Give containers without requests/limits the ``default``/``defaultRequest`` of Container LimitRanges."""
    for lr in limit_ranges:
        for item in (lr.get("spec") or {}).get("limits") or []:
            if item.get("type") != "Container":
                continue
            for container in (pod.get("spec") or {}).get("containers") or []:
                resources = container.setdefault("resources", {})
                limits = resources.setdefault("limits", {})
                requests = resources.setdefault("requests", {})
                for res, value in (item.get("default") or {}).items():
                    limits.setdefault(res, value)
                for res, value in (item.get("defaultRequest") or {}).items():
                    requests.setdefault(res, value)
                for res, value in limits.items():
                    requests.setdefault(res, value)
                if not limits:
                    resources.pop("limits")
                if not requests:
                    resources.pop("requests")


def check_limit_range_max(pod: Obj, limit_ranges: list[Obj]) -> None:
    """Refuse (403) containers above a Container LimitRange ``max``."""
    name = pod["metadata"].get("name", "")
    for lr in limit_ranges:
        for item in (lr.get("spec") or {}).get("limits") or []:
            if item.get("type") != "Container":
                continue
            for container in (pod.get("spec") or {}).get("containers") or []:
                limits = (container.get("resources") or {}).get("limits") or {}
                for res, value in (item.get("max") or {}).items():
                    if res in limits and parse_quantity(limits[res]) > parse_quantity(value):
                        raise forbidden(
                            "pods",
                            name,
                            f"maximum {res} usage per Container is {value}, but limit is {limits[res]}",
                        )


def quota_charges_pod(pod: Obj, now: float | None = None) -> bool:
    """Whether a pod's compute usage (and ``pods``) is charged to quota, as the apiserver's ``QuotaV1Pod``
    decides: not once it has finished, nor once ``deletionTimestamp`` plus ``deletionGracePeriodSeconds``
    has passed, so a pod stuck Terminating on a lost node stops holding its namespace's quota."""
    if (pod.get("status") or {}).get("phase") in TERMINAL:
        return False
    meta = pod.get("metadata") or {}
    stamp, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    if stamp and grace is not None:
        try:
            deadline = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() + int(grace)
        except (TypeError, ValueError):
            return True
        return (time.time() if now is None else now) <= deadline
    return True


def pod_usage(pod: Obj) -> dict[str, Decimal]:
    """What one pod counts against quota keys: ``count/pods`` while it is stored, the rest while
    `quota_charges_pod`."""
    if not quota_charges_pod(pod):
        return {"count/pods": Decimal(1)}
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for res, value in pod_requests(pod).items():
        usage[f"requests.{res}"] = value
        if res in ("cpu", "memory", "ephemeral-storage"):
            usage[res] = value
    for res, value in pod_limits(pod).items():
        usage[f"limits.{res}"] = value
    return usage


def claim_usage(claim: Obj) -> dict[str, Decimal]:
    """What one PersistentVolumeClaim counts against quota keys, as the apiserver's claim evaluator counts
    it: every claim that exists (one being deleted too), its requested storage, and both per storage class."""
    spec = claim.get("spec") or {}
    requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    try:
        storage = parse_quantity(requested) if requested is not None else Decimal(0)
    except QuantityError:
        storage = Decimal(0)
    usage = {"persistentvolumeclaims": Decimal(1), "count/persistentvolumeclaims": Decimal(1)}
    usage["requests.storage"] = storage
    klass = spec.get("storageClassName")
    if klass:
        usage[f"{klass}{_CLASS_SCOPED}persistentvolumeclaims"] = Decimal(1)
        usage[f"{klass}{_CLASS_SCOPED}requests.storage"] = storage
    return usage


def quota_used(
    quota: Obj, pods: list[Obj], counts: dict[str, int], claims: list[Obj] | None = None
) -> dict[str, Decimal]:
    """Current usage for every key in a quota's ``spec.hard``: the pods' and the claims' (``claims``)."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = {key: Decimal(0) for key in hard}
    for usage in [pod_usage(pod) for pod in pods] + [claim_usage(claim) for claim in claims or []]:
        for key, value in usage.items():
            if key in used:
                used[key] += value
    for key in hard:
        if key in counts:
            used[key] = Decimal(counts[key])
    return used


def check_quotas(pod: Obj, quotas: list[Obj], pods: list[Obj]) -> None:
    """Refuse (403) a new pod whose usage would take any quota past ``spec.hard``."""
    name = pod["metadata"].get("name", "")
    wanted = pod_usage(pod)
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        qname = quota["metadata"]["name"]
        missing = sorted(
            key
            for key in hard
            if key.startswith(("requests.", "limits."))
            and key not in wanted
            and "/" not in key
            and key != "requests.storage"
        )
        if missing:
            raise forbidden("pods", name, f"failed quota: {qname}: must specify {','.join(missing)}")
        used = quota_used(quota, pods, {})
        over = sorted(
            key for key in hard if key in wanted and used[key] + wanted[key] > parse_quantity(hard[key])
        )
        if over:
            requested = ",".join(f"{k}={format_amount(k, wanted[k])}" for k in over)
            in_use = ",".join(f"{k}={format_amount(k, used[k])}" for k in over)
            limited = ",".join(f"{k}={hard[k]}" for k in over)
            raise forbidden(
                "pods",
                name,
                f"exceeded quota: {qname}, requested: {requested}, used: {in_use}, limited: {limited}",
            )


def check_claim_quotas(claim: Obj, quotas: list[Obj], claims: list[Obj]) -> None:
    """Refuse (403) a new claim that would take a quota's claim count or requested storage past
    ``spec.hard``, with the apiserver's words."""
    name = claim["metadata"].get("name", "")
    wanted = claim_usage(claim)
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = quota_used(quota, [], {}, claims)
        over = sorted(
            key for key in hard if key in wanted and used[key] + wanted[key] > parse_quantity(hard[key])
        )
        if over:
            qname = quota["metadata"]["name"]
            requested = ",".join(f"{k}={format_amount(k, wanted[k])}" for k in over)
            in_use = ",".join(f"{k}={format_amount(k, used[k])}" for k in over)
            limited = ",".join(f"{k}={hard[k]}" for k in over)
            raise forbidden(
                "persistentvolumeclaims",
                name,
                f"exceeded quota: {qname}, requested: {requested}, used: {in_use}, limited: {limited}",
            )
