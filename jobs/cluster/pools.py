"""The node pools that can grow (NODE_POOLS) as nodes the cycle can place jobs on: one potential node per
node a pool may still add (`jobs.core.pools`), in clusterio's NodeInfo form.

A pool's nodes now are those carrying NODE_POOL_LABEL with the pool's name (GKE `cloud.google.com/gke-nodepool`,
EKS `eks.amazonaws.com/nodegroup`, Karpenter `karpenter.sh/nodepool`), or, without that setting, those of its
GPU type. A pool declared with a `node_group` takes its min and max sizes from the cluster autoscaler's status
ConfigMap (AUTOSCALER_STATUS_CONFIGMAP), read at most once per `SIZES_TTL` seconds per process.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence

from django.conf import settings

from clusterio.capacity import Resources as NodeResources
from clusterio.client import Cluster, NodeInfo
from clusterio.errors import ClusterError
from clusterio.taints import EFFECTS, Taint
from jobs.core.pools import PoolSpec, parse_pools, pool_of, potential_nodes, sized

log = logging.getLogger(__name__)
SIZES_TTL = 60.0
_sizes_lock = threading.Lock()
_sizes: dict[str, tuple[float, dict[str, tuple[int, int]]]] = {}


def parse_taint(text: str) -> Taint:
    """`key=value:Effect` or `key:Effect` (kubectl's spelling) as a Taint; ValueError when misspelt."""
    body, _, effect = text.rpartition(":")
    key, _, value = body.partition("=")
    if not key or effect not in EFFECTS:
        raise ValueError(f"taint {text!r}: expected key=value:Effect with Effect one of {', '.join(EFFECTS)}")
    return Taint(key, value, effect)


@functools.cache
def _pools(text: str, by_label: bool) -> tuple[PoolSpec, ...]:
    pools = tuple(parse_pools(text, by_label=by_label))
    for pool in pools:
        for taint in pool.taints:
            parse_taint(taint)
    return pools


def node_pools() -> tuple[PoolSpec, ...]:
    """NODE_POOLS, parsed (raises ValueError when misspelt; `jobs.checks` reports it at start)."""
    return _pools(settings.NODE_POOLS, bool(settings.NODE_POOL_LABEL))


def node_group_sizes(client: Cluster, pools: Sequence[PoolSpec]) -> dict[str, tuple[int, int]]:
    """(min, max) per node group that the pools name, from the autoscaler's status (cached `SIZES_TTL`
    seconds); {} when no pool names one, or the status cannot be read (the declared sizes then count)."""
    if not any(pool.node_group for pool in pools):
        return {}
    where = settings.AUTOSCALER_STATUS_CONFIGMAP
    with _sizes_lock:
        cached = _sizes.get(where)
        if cached is not None and time.monotonic() - cached[0] < SIZES_TTL:
            return cached[1]
    namespace, _, name = where.partition("/")
    try:
        groups = client.autoscaler_node_groups(namespace, name)
    except ClusterError as exc:
        log.warning(
            "cluster autoscaler status %s unreadable (%s); pools keep their declared sizes", where, exc
        )
        groups = None
    sizes = {group: (size.min_nodes, size.max_nodes) for group, size in (groups or {}).items()}
    with _sizes_lock:
        _sizes[where] = (time.monotonic(), sizes)
    return sizes


def forget_node_group_sizes() -> None:
    """Read the autoscaler's status afresh next time (tests; a changed setting)."""
    with _sizes_lock:
        _sizes.clear()


def sized_pools(client: Cluster) -> list[PoolSpec]:
    """The pools, each with the sizes its node group reports where it names one."""
    pools = node_pools()
    return sized(pools, node_group_sizes(client, pools))


def potential_pool_nodes(nodes: Sequence[NodeInfo], client: Cluster | None = None) -> list[NodeInfo]:
    """What the pools may still add beyond ``nodes`` (a pool's nodes are those carrying its pool label, or
    without NODE_POOL_LABEL those of its GPU type), each an empty ready node of its pool's shape and taints,
    named `pool:<pool>/<n>`. With `client`, pools naming a node group take its sizes from the cluster."""
    pools = sized_pools(client) if client is not None else list(node_pools())
    if not pools:
        return []
    taints = {pool.name: tuple(sorted(parse_taint(t) for t in pool.taints)) for pool in pools}
    by_label = bool(settings.NODE_POOL_LABEL)
    found = []
    for potential in potential_nodes(
        pools, ((n.gpu_type, n.pool) for n in nodes), lambda name: name, by_label
    ):
        shape = potential.shape
        room = NodeResources(shape.gpus, shape.cpu_millis, shape.memory_mib)
        name = pool_of(potential.name)
        found.append(
            NodeInfo(potential.name, True, potential.gpu_type, room, room, False, taints[name], name)
        )
    return found
