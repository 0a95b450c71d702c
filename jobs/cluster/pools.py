"""The node pools that can grow (NODE_POOLS) as nodes the cycle can place jobs on: one potential node per
node a pool may still add (`jobs.core.pools`), in clusterio's NodeInfo form."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from django.conf import settings

from clusterio.capacity import Resources as NodeResources
from clusterio.client import NodeInfo
from clusterio.taints import EFFECTS, Taint
from jobs.core.pools import PoolSpec, parse_pools, pool_of, potential_nodes


def parse_taint(text: str) -> Taint:
    """`key=value:Effect` or `key:Effect` (kubectl's spelling) as a Taint; ValueError when misspelt."""
    body, _, effect = text.rpartition(":")
    key, _, value = body.partition("=")
    if not key or effect not in EFFECTS:
        raise ValueError(f"taint {text!r}: expected key=value:Effect with Effect one of {', '.join(EFFECTS)}")
    return Taint(key, value, effect)


@functools.cache
def _pools(text: str) -> tuple[PoolSpec, ...]:
    pools = tuple(parse_pools(text))
    for pool in pools:
        for taint in pool.taints:
            parse_taint(taint)
    return pools


def node_pools() -> tuple[PoolSpec, ...]:
    """NODE_POOLS, parsed (raises ValueError when misspelt; `jobs.checks` reports it at start)."""
    return _pools(settings.NODE_POOLS)


def potential_pool_nodes(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """What the pools may still add beyond ``nodes`` (a pool's nodes are those of its GPU type), each an
    empty ready node of its pool's shape and taints, named `pool:<pool>/<n>`."""
    pools = node_pools()
    if not pools:
        return []
    taints = {pool.name: tuple(sorted(parse_taint(t) for t in pool.taints)) for pool in pools}
    found = []
    for potential in potential_nodes(pools, (n.gpu_type for n in nodes), lambda name: name):
        shape = potential.shape
        room = NodeResources(shape.gpus, shape.cpu_millis, shape.memory_mib)
        pool = taints[pool_of(potential.name)]
        found.append(NodeInfo(potential.name, True, potential.gpu_type, room, room, False, pool))
    return found
