"""The kubelet's admission of a pod bound to its node: the check a pod with ``spec.nodeName`` gets instead of
the scheduler's.

A kubelet re-checks every pod it is given against what it has already admitted (resources first, then node
affinity, then ``NoExecute`` taints) and rejects one that does not fit: the pod ends ``Failed`` with the
predicate's reason (``OutOfcpu``, ``OutOfmemory``, ``OutOfnvidia.com/gpu``, ``NodeAffinity``,
``TaintToleration``) and ``Pod was rejected: ...`` as its message, as ``kubelet.rejectPod`` writes it.
"""

from __future__ import annotations

from collections import Counter
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING

from kubesim.admission import pod_requests
from kubesim.scheduler import AFFINITY_MISMATCH, insufficient, node_affinity_ok, untolerated_taint
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.api import Api

TAINTS_NOT_TOLERATED = "node(s) had taints that the pod didn't tolerate"


def _extended(name: str) -> bool:
    """An extended resource (``vendor/name``), as opposed to cpu, memory, ... or ``kubernetes.io/...``."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests."))


def _amount(resource: str, value: Decimal) -> int:
    """The integer the kubelet prints: millicores for cpu, the plain value otherwise (rounded up)."""
    scaled = value * 1000 if resource == "cpu" else value
    return int(scaled.to_integral_value(rounding=ROUND_CEILING))


def rejection(pod: Obj, node: Obj, admitted: list[Obj]) -> tuple[str, str] | None:
    """Why the kubelet rejects ``pod`` on ``node`` given the pods it already runs (``admitted``), as
    ``(reason, message)`` without the ``Pod was rejected: `` prefix; None when it is admitted."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    # Extended resources the node lacks are left to others (a scheduler extender), as the kubelet does.
    requests = {r: v for r, v in pod_requests(pod).items() if not _extended(r) or r in allocatable}
    used: Counter[str] = Counter()
    for other in admitted:
        used.update(pod_requests(other))
        used["pods"] += 1
    short = insufficient(requests, used, allocatable)
    if short:
        resource, in_use, capacity = short[0]
        wanted = requests.get(resource, Decimal(1))
        message = (
            f"Node didn't have enough resource: {resource}, requested: {_amount(resource, wanted)}, "
            f"used: {_amount(resource, in_use)}, capacity: {_amount(resource, capacity)}"
        )
        return f"OutOf{resource}", message
    if not node_affinity_ok(pod, node):
        return "NodeAffinity", f"Predicate NodeAffinity failed: {AFFINITY_MISMATCH}"
    if untolerated_taint(pod, node, ("NoExecute",)) is not None:
        return "TaintToleration", f"Predicate TaintToleration failed: {TAINTS_NOT_TOLERATED}"
    return None


def admit(api: Api, pod: Obj, node: Obj, admitted: list[Obj], forced: tuple[str, str] | None = None) -> bool:
    """Admit the pod, or fail it as ``kubelet.rejectPod`` does (phase Failed, the predicate's reason, the
    message after ``Pod was rejected: ``, and a Warning Event with that reason); returns whether admitted.
    ``forced``: a rejection injected by a test (``Faults.reject_pod_admission``), as ``(reason, message)``."""
    refused = forced or rejection(pod, node, admitted)
    if refused is None:
        return True
    reason, message = refused

    def reject(p: Obj) -> None:
        p.setdefault("status", {}).update(
            phase="Failed", reason=reason, message=f"Pod was rejected: {message}"
        )

    api.mutate("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], reject)
    api.record_event(pod, "Warning", reason, message, "kubelet")
    return False
