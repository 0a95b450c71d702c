"""Node pools that can grow (NODE_POOLS): their potential capacity as admission sees it.

A pool scaled by the cluster autoscaler (Cluster Autoscaler node group, GKE node pool, Karpenter NodePool)
may have fewer nodes than it can hold, none at all when it scales from zero. Admission counts its room to
grow as *potential nodes*: one per node the pool may still add (``max_nodes`` less the ready nodes of its GPU
type now), named ``POTENTIAL_PREFIX + "<pool>/<n>"``, each empty with the pool's node shape and taints. A
gang placed on them is launched with unpinned pods (``is_potential``), so that the kube-scheduler leaves
them Unschedulable and the autoscaler grows the pool for them. Pure: no Django.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from common.resources import Resources

POTENTIAL_PREFIX = "pool:"
_FIELDS = {"name", "gpu_type", "gpus", "cpu_millis", "memory_mib", "taints", "min_nodes", "max_nodes"}


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool: its nodes' allocatable resources, GPU type and taints (spelt as `admission.Node.taints`),
    and how many nodes it may have. Its nodes now are told by their GPU type, so each pool's is its own."""

    name: str
    gpu_type: str
    gpus: int
    cpu_millis: int
    memory_mib: int
    max_nodes: int
    min_nodes: int = 0
    taints: tuple[str, ...] = ()

    @property
    def shape(self) -> Resources:
        return Resources(self.gpus, self.cpu_millis, self.memory_mib)


def parse_pools(text: str) -> list[PoolSpec]:
    """NODE_POOLS (a JSON list of objects with `_FIELDS`) as pools; ValueError naming the bad entry."""
    if not text.strip():
        return []
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"NODE_POOLS is not JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise ValueError("NODE_POOLS must be a JSON list of pools")
    pools = [_pool(i, entry) for i, entry in enumerate(raw)]
    names = Counter(p.name for p in pools)
    types = Counter(p.gpu_type for p in pools)
    if any(n > 1 for n in names.values()) or any(n > 1 for n in types.values()):
        raise ValueError("NODE_POOLS: each pool needs its own name and its own gpu_type")
    return pools


def _pool(index: int, entry: Any) -> PoolSpec:
    where = f"NODE_POOLS[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object")
    unknown = set(entry) - _FIELDS
    missing = {"name", "gpu_type", "gpus", "cpu_millis", "memory_mib", "max_nodes"} - set(entry)
    if unknown or missing:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    numbers = ("gpus", "cpu_millis", "memory_mib", "max_nodes", "min_nodes")
    for key in numbers:
        value = entry.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}.{key} must be a whole number >= 0")
    if not entry.get("name") or not isinstance(entry["name"], str) or "/" in entry["name"]:
        raise ValueError(f"{where}.name must be a non-empty string without '/'")
    if not entry.get("gpu_type") or not isinstance(entry["gpu_type"], str):
        raise ValueError(f"{where}.gpu_type must be a non-empty string (a pool's nodes are told by it)")
    taints = entry.get("taints", [])
    if not isinstance(taints, list) or not all(isinstance(t, str) and t for t in taints):
        raise ValueError(
            f"{where}.taints must be a list of taints such as 'nvidia.com/gpu=present:NoSchedule'"
        )
    if entry.get("min_nodes", 0) > entry["max_nodes"]:
        raise ValueError(f"{where}: min_nodes is above max_nodes")
    return PoolSpec(
        name=entry["name"],
        gpu_type=entry["gpu_type"],
        gpus=entry["gpus"],
        cpu_millis=entry["cpu_millis"],
        memory_mib=entry["memory_mib"],
        max_nodes=entry["max_nodes"],
        min_nodes=entry.get("min_nodes", 0),
        taints=tuple(taints),
    )


def is_potential(node_name: str) -> bool:
    """Whether a placement names a potential node of a pool rather than a node that exists."""
    return node_name.startswith(POTENTIAL_PREFIX)


def pool_of(node_name: str) -> str:
    """The pool a potential node belongs to."""
    return node_name.removeprefix(POTENTIAL_PREFIX).rsplit("/", 1)[0]


@dataclass(frozen=True, slots=True)
class Potential:
    """A node a pool may still add: name, the pool's (canonical) GPU type, shape and taints."""

    name: str
    gpu_type: str
    shape: Resources
    taints: tuple[str, ...]


def potential_nodes(
    pools: Iterable[PoolSpec], node_types: Iterable[str | None], resolve: Any
) -> list[Potential]:
    """The nodes each pool may still add: ``max_nodes`` less its nodes now (those of its GPU type among
    ``node_types``, already canonical); ``resolve`` makes a pool's GPU type canonical the same way."""
    present = Counter(node_types)
    found = []
    for pool in pools:
        gpu_type = resolve(pool.gpu_type) or pool.gpu_type
        for n in range(max(0, pool.max_nodes - present.get(gpu_type, 0))):
            found.append(Potential(f"{POTENTIAL_PREFIX}{pool.name}/{n}", gpu_type, pool.shape, pool.taints))
    return found
