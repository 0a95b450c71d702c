"""The per-node capacity summary the watcher publishes to Redis for the scheduler cycle (other processes).

The watcher keeps a watch-backed `NodeCache` and writes every node's `NodeInfo` here, with the time it was
written, on each change (at most every `PUBLISH_INTERVAL` seconds) and at least every `HEARTBEAT_SECONDS`
while its watches are healthy. Readers take it when it is younger than `STALE_SECONDS`, else they list
the cluster themselves (and log why): a stopped watcher costs lists, never wrong capacity for long.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import redis
from django.conf import settings

from clusterio.capacity import NodeInfo, Resources
from clusterio.nodecache import NodeCache
from clusterio.taints import Taint

log = logging.getLogger(__name__)

PUBLISH_INTERVAL = 0.05
HEARTBEAT_SECONDS = 5.0
STALE_SECONDS = 20.0


def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1, decode_responses=True
    )


def key(installation: str) -> str:
    """The Redis key of one installation's summary."""
    return f"trainyard:nodesummary:{installation}"


def _encode(info: NodeInfo) -> dict[str, Any]:
    def res(r: Resources) -> list[int]:
        return [r.gpus, r.cpu_millis, r.memory_mib]

    return {
        "name": info.name,
        "ready": info.ready,
        "gpu_type": info.gpu_type,
        "allocatable": res(info.allocatable),
        "free": res(info.free),
        "unschedulable": info.unschedulable,
        "taints": [[t.key, t.value, t.effect] for t in info.taints],
        "pool": info.pool,
        "labels": dict(info.labels),
    }


def _decode(data: dict[str, Any]) -> NodeInfo:
    return NodeInfo(
        name=data["name"],
        ready=data["ready"],
        gpu_type=data["gpu_type"],
        allocatable=Resources(*data["allocatable"]),
        free=Resources(*data["free"]),
        unschedulable=data["unschedulable"],
        taints=tuple(Taint(*t) for t in data["taints"]),
        pool=data.get("pool"),
        labels=tuple(sorted((data.get("labels") or {}).items())),
    )


def publish(installation: str, infos: list[NodeInfo]) -> None:
    """Write the summary with the current time (failures are logged: readers then fall back)."""
    payload = json.dumps({"at": time.time(), "nodes": [_encode(i) for i in infos]})
    try:
        _redis().set(key(installation), payload, ex=int(STALE_SECONDS * 3))
    except redis.RedisError as exc:
        log.warning("node summary not published: %s", exc)


def read(installation: str, max_age: float = STALE_SECONDS) -> list[NodeInfo] | None:
    """The published nodes, or None (logged) when there is no summary or it is older than `max_age`."""
    try:
        raw = _redis().get(key(installation))
    except redis.RedisError as exc:
        log.info("node summary unreadable (%s); listing the cluster", exc)
        return None
    if not raw:
        log.info("no node summary from the watcher; listing the cluster")
        return None
    data = json.loads(raw)
    age = time.time() - float(data["at"])
    if age > max_age:
        log.info("node summary is %.0f s old; listing the cluster", age)
        return None
    return [_decode(n) for n in data["nodes"]]


def clear(installation: str) -> None:
    """Remove the summary (the watcher stopping, or tests)."""
    try:
        _redis().delete(key(installation))
    except redis.RedisError as exc:
        log.warning("node summary not cleared: %s", exc)


class Publisher:
    """Runs a `NodeCache` and publishes its summary on changes (coalesced) and on a heartbeat."""

    def __init__(self, cache_factory: Any, installation: str) -> None:
        self.installation = installation
        self._dirty = threading.Event()
        self.cache: NodeCache = cache_factory(on_change=self._dirty.set)
        self.published = 0

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: publish after each change and every `HEARTBEAT_SECONDS` while the cache is healthy."""
        threads = self.cache.run(stop)
        last = 0.0
        try:
            while not stop.wait(PUBLISH_INTERVAL):
                due = self._dirty.is_set() or time.monotonic() - last >= HEARTBEAT_SECONDS
                if self.cache.healthy and due:
                    self._dirty.clear()
                    publish(self.installation, self.cache.infos())
                    self.published += 1
                    last = time.monotonic()
        finally:
            for thread in threads:
                thread.join(timeout=10)
            clear(self.installation)
