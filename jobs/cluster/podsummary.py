"""The platform's own pods as the watcher sees them, published to Redis for reconcile (another process).

The watcher's reflector already holds every managed pod (list once, then watch). It writes a compact copy
of them here, with the time, after each change (coalesced) and at least every `HEARTBEAT_SECONDS` while its
watch is healthy. Reconcile reads the copy to see whether anything needs repair; it lists the cluster only
when something does (to act on what is there now, never on the copy), or when the copy is missing or older
than `STALE_SECONDS` (a stopped watcher costs lists, never a wrong repair). The copy holds managed pods
without a job label too (nobody's: reconcile deletes them); the reflector's own relist every
WATCHER_RELIST_SECONDS is its resync, so reconcile never lists pods on a timer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings

log = logging.getLogger(__name__)

PUBLISH_INTERVAL = 0.1
HEARTBEAT_SECONDS = 5.0
STALE_SECONDS = 20.0

Obj = dict[str, Any]


def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1, decode_responses=True
    )


def key(installation: str) -> str:
    """The Redis key of one installation's managed pods."""
    return f"trainyard:podsummary:{installation}"


def compact(pod: Obj) -> Obj:
    """What reconcile reads of a pod: its name, namespace, labels and deletion time; its node and deadline;
    its phase, start time and conditions."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": meta.get("labels") or {},
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "activeDeadlineSeconds": spec.get("activeDeadlineSeconds"),
        },
        "status": {
            "phase": status.get("phase"),
            "startTime": status.get("startTime"),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason")}
                for c in status.get("conditions") or []
            ],
        },
    }


def _stamp(value: Any) -> Any:
    """Timestamps as the API's JSON spells them (the kubernetes client hands datetimes)."""
    return value.isoformat() if hasattr(value, "isoformat") else value


def publish(installation: str, pods: list[Obj]) -> None:
    """Write the copy with the current time (failures are logged: reconcile then lists)."""
    payload = json.dumps({"at": time.time(), "pods": [compact(p) for p in pods]}, default=_stamp)
    try:
        _redis().set(key(installation), payload, ex=int(STALE_SECONDS * 3))
    except redis.RedisError as exc:
        log.warning("pod summary not published: %s", exc)


def read(installation: str, max_age: float | None = None) -> list[Obj] | None:
    """The published pods, or None when there is none, it is unreadable or older than `max_age`
    (`STALE_SECONDS` by default)."""
    try:
        raw = _redis().get(key(installation))
    except redis.RedisError as exc:
        log.info("pod summary unreadable (%s); listing the cluster", exc)
        return None
    if not raw:
        return None
    data = json.loads(raw)
    if time.time() - float(data["at"]) > (STALE_SECONDS if max_age is None else max_age):
        log.info("pod summary is stale; listing the cluster")
        return None
    return list(data["pods"])


def claim_turn(name: str, seconds: int) -> bool:
    """Whether this caller is the first to claim `name` in the last `seconds` (SET NX EX); True when Redis
    cannot answer."""
    try:
        return bool(_redis().set(f"trainyard:turn:{name}", 1, nx=True, ex=max(1, seconds)))
    except redis.RedisError:
        return True


def forget_turn(name: str) -> None:
    """Give up `name`'s turn, so the next `claim_turn` gets it (tests)."""
    try:
        _redis().delete(f"trainyard:turn:{name}")
    except redis.RedisError as exc:
        log.warning("turn %s not forgotten: %s", name, exc)


def clear(installation: str) -> None:
    """Remove the copy (the watcher stopping, or tests)."""
    try:
        _redis().delete(key(installation))
    except redis.RedisError as exc:
        log.warning("pod summary not cleared: %s", exc)


class Publisher:
    """Publishes `snapshot()` after each `changed()` (coalesced) and every `HEARTBEAT_SECONDS`, while
    `healthy()` says the pods it reads are the cluster's (listed, and watched without a failure since)."""

    def __init__(
        self, installation: str, snapshot: Callable[[], list[Obj]], healthy: Callable[[], bool]
    ) -> None:
        self.installation = installation
        self.snapshot = snapshot
        self.healthy = healthy
        self._dirty = threading.Event()
        self.published = 0

    def changed(self) -> None:
        self._dirty.set()

    def run(self, stop: threading.Event) -> None:
        last = 0.0
        try:
            while not stop.wait(PUBLISH_INTERVAL):
                due = self._dirty.is_set() or time.monotonic() - last >= HEARTBEAT_SECONDS
                if due and self.healthy():
                    self._dirty.clear()
                    publish(self.installation, self.snapshot())
                    self.published += 1
                    last = time.monotonic()
        finally:
            clear(self.installation)
