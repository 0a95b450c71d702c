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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from common.resources import Resources

POTENTIAL_PREFIX = "pool:"
_FIELDS = {
    "name",
    "gpu_type",
    "gpus",
    "cpu_millis",
    "memory_mib",
    "taints",
    "min_nodes",
    "max_nodes",
    "node_group",
}


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool: its nodes' allocatable resources, GPU type (none for a CPU pool) and taints (spelt as
    `admission.Node.taints`), and how many nodes it may have. Its nodes now are those whose pool label
    (NODE_POOL_LABEL) names it, or without that label setting those of its GPU type. `node_group` is its
    name in the cluster autoscaler's status, whose min and max sizes then win over the declared ones."""

    name: str
    gpu_type: str
    gpus: int
    cpu_millis: int
    memory_mib: int
    max_nodes: int
    min_nodes: int = 0
    taints: tuple[str, ...] = ()
    node_group: str = ""

    @property
    def shape(self) -> Resources:
        return Resources(self.gpus, self.cpu_millis, self.memory_mib)


def parse_pools(text: str, *, by_label: bool = False) -> list[PoolSpec]:
    """NODE_POOLS (a JSON list of objects with `_FIELDS`) as pools; ValueError naming the bad entry.
    `by_label`: nodes are told by a pool label (NODE_POOL_LABEL), so a pool needs no GPU type of its own
    (CPU pools, two pools of one GPU type)."""
    if not text.strip():
        return []
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"NODE_POOLS is not JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise ValueError("NODE_POOLS must be a JSON list of pools")
    pools = [_pool(i, entry, by_label) for i, entry in enumerate(raw)]
    names = Counter(p.name for p in pools)
    if any(n > 1 for n in names.values()):
        raise ValueError("NODE_POOLS: each pool needs its own name")
    types = Counter(p.gpu_type for p in pools)
    if not by_label and any(n > 1 for n in types.values()):
        raise ValueError(
            "NODE_POOLS: each pool needs its own gpu_type (its nodes are told by it), "
            "or set NODE_POOL_LABEL to tell them by their pool label"
        )
    return pools


def _pool(index: int, entry: Any, by_label: bool) -> PoolSpec:
    where = f"NODE_POOLS[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object")
    unknown = set(entry) - _FIELDS
    required = {"name", "gpus", "cpu_millis", "memory_mib"}
    if not by_label:
        required.add("gpu_type")
    if not entry.get("node_group"):
        required.add("max_nodes")  # else the autoscaler's status says it
    missing = required - set(entry)
    if unknown or missing:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    numbers = ("gpus", "cpu_millis", "memory_mib", "max_nodes", "min_nodes")
    for key in numbers:
        value = entry.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}.{key} must be a whole number >= 0")
    if not entry.get("name") or not isinstance(entry["name"], str) or "/" in entry["name"]:
        raise ValueError(f"{where}.name must be a non-empty string without '/'")
    gpu_type = entry.get("gpu_type", "")
    if not isinstance(gpu_type, str) or (not by_label and not gpu_type):
        raise ValueError(f"{where}.gpu_type must be a non-empty string (a pool's nodes are told by it)")
    if gpu_type and not entry["gpus"]:
        raise ValueError(f"{where}: a pool with a gpu_type needs gpus > 0")
    if not isinstance(entry.get("node_group", ""), str):
        raise ValueError(f"{where}.node_group must be the node group's name in the autoscaler's status")
    taints = entry.get("taints", [])
    if not isinstance(taints, list) or not all(isinstance(t, str) and t for t in taints):
        raise ValueError(
            f"{where}.taints must be a list of taints such as 'nvidia.com/gpu=present:NoSchedule'"
        )
    if entry.get("min_nodes", 0) > entry.get("max_nodes", entry.get("min_nodes", 0)):
        raise ValueError(f"{where}: min_nodes is above max_nodes")
    return PoolSpec(
        name=entry["name"],
        gpu_type=gpu_type,
        gpus=entry["gpus"],
        cpu_millis=entry["cpu_millis"],
        memory_mib=entry["memory_mib"],
        max_nodes=entry.get("max_nodes", 0),
        min_nodes=entry.get("min_nodes", 0),
        taints=tuple(taints),
        node_group=entry.get("node_group", ""),
    )


def sized(pools: Iterable[PoolSpec], sizes: Mapping[str, tuple[int, int]]) -> list[PoolSpec]:
    """The pools with the min and max sizes the autoscaler reports for their node groups (`sizes`: node
    group name -> (min, max)); a pool whose group it does not report keeps its declared sizes."""
    found = []
    for pool in pools:
        size = sizes.get(pool.node_group) if pool.node_group else None
        found.append(pool if size is None else replace(pool, min_nodes=size[0], max_nodes=size[1]))
    return found


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
    gpu_type: str | None
    shape: Resources
    taints: tuple[str, ...]


def potential_nodes(
    pools: Iterable[PoolSpec],
    nodes: Iterable[tuple[str | None, str | None]],
    resolve: Any,
    by_label: bool = False,
) -> list[Potential]:
    """The nodes each pool may still add: ``max_nodes`` less its nodes now. ``nodes`` are (GPU type, pool
    label value) of the cluster's nodes, the GPU type already canonical; a pool's nodes are those whose
    pool label names it (`by_label`), else those of its GPU type. ``resolve`` makes a pool's GPU type
    canonical the same way."""
    by_type: Counter[str | None] = Counter()
    by_pool: Counter[str | None] = Counter()
    for gpu_type, pool_name in nodes:
        by_type[gpu_type] += 1
        by_pool[pool_name] += 1
    found = []
    for pool in pools:
        gpu_type = (resolve(pool.gpu_type) or pool.gpu_type) if pool.gpu_type else None
        present = by_pool.get(pool.name, 0) if by_label else by_type.get(gpu_type, 0)
        for n in range(max(0, pool.max_nodes - present)):
            found.append(Potential(f"{POTENTIAL_PREFIX}{pool.name}/{n}", gpu_type, pool.shape, pool.taints))
    return found
