"""Per-node capacity from the API's own JSON: what each node offers and what is still free.

The scheduler admits jobs all-or-nothing against this view, so "free" follows the kube-scheduler's
own accounting: allocatable minus the effective requests of every pod bound to the node that has
not finished (Succeeded/Failed pods hold nothing).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from clusterio.builders.job import gpu_product
from clusterio.builders.tenant import GPU_RESOURCE
from clusterio.taints import Taint, taints_of

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Resources:
    """An amount of the three resources jobs ask for: whole GPUs, CPU millicores, memory in MiB."""

    gpus: int
    cpu_millis: int
    memory_mib: int

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus - other.gpus, self.cpu_millis - other.cpu_millis, self.memory_mib - other.memory_mib
        )

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus + other.gpus, self.cpu_millis + other.cpu_millis, self.memory_mib + other.memory_mib
        )


ZERO = Resources(0, 0, 0)


@dataclass(frozen=True)
class NodeInfo:
    """One node as the scheduler sees it; `free` may be negative on an over-committed node.

    `unschedulable` is the node's cordon flag (`spec.unschedulable`); a cordoned node takes no new pods.
    `taints` are its NoSchedule and NoExecute taints: only pods that tolerate every one of them may go there.
    """

    name: str
    ready: bool
    gpu_type: str | None
    allocatable: Resources
    free: Resources
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    pool: str | None = None  # the value of the node's pool label (`Connection.pool_label`), if any
    labels: tuple[tuple[str, str], ...] = ()  # the node's labels, sorted (node selectors are matched on them)


def quantity(value: Any) -> Decimal:
    """Parse a Kubernetes quantity ("1500m", "4Gi", 2) into a Decimal; malformed values count as 0."""
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, TypeError, ArithmeticError):
        return Decimal(0)


def _floor(value: Decimal) -> int:
    return math.floor(value)


def _ceil(value: Decimal) -> int:
    return math.ceil(value)


def resources_of(amounts: Mapping[str, Any], *, round_up: bool) -> Resources:
    """Convert a resource map (`{"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}`) to `Resources`.

    Requests round up and capacities round down, so a rounding error never makes room that is not there.
    """
    rnd = _ceil if round_up else _floor
    return Resources(
        gpus=rnd(quantity(amounts.get(GPU_RESOURCE, 0))),
        cpu_millis=rnd(quantity(amounts.get("cpu", 0)) * 1000),
        memory_mib=rnd(quantity(amounts.get("memory", 0)) / (1024 * 1024)),
    )


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: quantity(value) for name, value in amounts.items()}


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """A pod's effective requests as the scheduler counts them.

    Sum over containers (a limit stands in for a missing request, as the API server defaults it),
    at least the largest init container, plus the pod overhead.
    """
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in _container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in _container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, Decimal(0)) + quantity(value)
    return resources_of(total, round_up=True)


def _is_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_infos(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], pool_label: str = ""
) -> list[NodeInfo]:
    """Combine node objects and pod objects (API JSON) into `NodeInfo`s, sorted by node name; `pool_label`
    is the node label whose value names the node's pool."""
    used: dict[str, Resources] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        used[node_name] = used.get(node_name, ZERO) + pod_requests(pod)
    infos = []
    for node in nodes:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        allocatable = resources_of(status.get("allocatable") or status.get("capacity") or {}, round_up=False)
        infos.append(
            NodeInfo(
                name=meta.get("name", ""),
                ready=_is_ready(node),
                gpu_type=gpu_product(meta.get("labels") or {}),
                allocatable=allocatable,
                free=allocatable - used.get(meta.get("name", ""), ZERO),
                unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
                taints=taints_of(node),
                pool=(meta.get("labels") or {}).get(pool_label) if pool_label else None,
                labels=tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items())),
            )
        )
    return sorted(infos, key=lambda info: info.name)


def covers(desired: Any, current: Any) -> bool:
    """Tell whether `current` already holds everything `desired` says (quantities compared by value)."""
    if isinstance(desired, dict):
        return isinstance(current, dict) and all(covers(v, current.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(desired) == len(current)
            and all(covers(d, c) for d, c in zip(desired, current, strict=True))
        )
    if desired == current:
        return True
    return (
        isinstance(desired, str) and isinstance(current, str) and quantity(desired) == quantity(current) != 0
    )


def same_quota_hard(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Tell whether two ResourceQuotas cap exactly the same resources at the same amounts."""
    want = (desired.get("spec") or {}).get("hard") or {}
    have = (current.get("spec") or {}).get("hard") or {}
    return set(want) == set(have) and all(quantity(want[k]) == quantity(have[k]) for k in want)
