"""Platform telemetry for Prometheus, across processes: the helpers every process records with.

Web, worker and watcher are separate processes, so figures measured in one (an admission cycle's
duration, a pod event's lag, log lines stored, task failures) are kept in one Redis hash; the web
process's collector reads it, and the database, at scrape time. Redis holds only what may be lost.
These are cluster-wide: every web pod reports the same values. The one per-pod figure is the number of
WebSocket clients, counted in the web process that holds them (sum it over pods). The collector that
serves `/metrics` (with the database's figures) is `portal.telemetry.TrainyardCollector`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from prometheus_client import Gauge

log = logging.getLogger(__name__)
KEY = "trainyard:telemetry"
# The figures other processes record, always exposed (0 until first recorded), with their help text.
COUNTERS = {
    "log_lines": "Log lines stored by the log followers (rate() gives lines per second)",
    "task_failures": "Celery tasks that raised",
}
GAUGES = {
    "admission_cycle_seconds": "Duration of the latest admission cycle (the scheduler task that ran one)",
    "pod_event_lag_seconds": (
        "Latest pod event's delay: from the newest state change it reports to the watch loop receiving it"
    ),
}
# Per process (not registered globally: each /metrics scrape builds its own registry around it).
WEBSOCKET_CLIENTS = Gauge(
    "trainyard_websocket_clients", "Open WebSocket connections to this web process", registry=None
)


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1, decode_responses=True
    )


def count(name: str, amount: float = 1) -> None:
    """Add to a counter (e.g. `log_lines`, `task_failures`); never raises."""
    try:
        _redis().hincrbyfloat(KEY, f"counter:{name}", amount)
    except redis.RedisError:
        log.debug("telemetry counter %s lost", name)


def gauge(name: str, value: float) -> None:
    """Set a gauge to its latest value (e.g. `admission_cycle_seconds`, `pod_event_lag_seconds`)."""
    try:
        _redis().hset(KEY, f"gauge:{name}", value)
    except redis.RedisError:
        log.debug("telemetry gauge %s lost", name)


def snapshot() -> dict[str, float]:
    """Everything recorded so far ({} when Redis is down)."""
    try:
        raw = _redis().hgetall(KEY)
    except redis.RedisError:
        return {}
    return {str(key): float(value) for key, value in raw.items()}


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def pod_event_lag(pod: dict[str, Any], now: float) -> float | None:
    """Seconds from the newest change a pod reports (condition transitions, container starts and ends,
    its creation) to `now`; None when it reports none. The API's times have one-second resolution."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    stamps = [meta.get("creationTimestamp"), status.get("startTime")]
    stamps += [c.get("lastTransitionTime") for c in status.get("conditions") or []]
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        for state in (container.get("state") or {}).values():
            if isinstance(state, dict):
                stamps += [state.get("startedAt"), state.get("finishedAt")]
    times = [t for t in map(_timestamp, stamps) if t is not None]
    return max(0.0, now - max(times)) if times else None


def observe_pod_event(kind: str, pod: dict[str, Any]) -> None:
    """Record the watch loop's lag for one pod event (a deletion reports no new time, so it is skipped)."""
    if kind == "DELETED":
        return
    lag = pod_event_lag(pod, time.time())
    if lag is not None:
        gauge("pod_event_lag_seconds", lag)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class CountWebSocketClients:
    """ASGI middleware: WEBSOCKET_CLIENTS counts the sockets the wrapped app accepted and has not let go."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        accepted = False

        async def counting_send(message: dict[str, Any]) -> None:
            nonlocal accepted
            if message.get("type") == "websocket.accept" and not accepted:
                accepted = True
                WEBSOCKET_CLIENTS.inc()
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            if accepted:
                WEBSOCKET_CLIENTS.dec()


# -- heartbeats of the processes without HTTP (worker, beat, watcher) ----------------------------------


def heartbeat_path(process: str) -> Path | None:
    """Where `process` ("worker", "beat", "watcher") keeps its heartbeat; None when heartbeats are off."""
    directory: str = getattr(settings, "HEARTBEAT_DIR", "")
    return Path(directory) / f"trainyard-{process}.alive" if directory else None


def heartbeat(process: str) -> None:
    """Touch the process's heartbeat file (never raises: a probe failing is the signal)."""
    path = heartbeat_path(process)
    if path is None:
        return
    try:
        path.touch()
    except OSError as exc:
        log.warning("heartbeat %s not written: %s", path, exc)


# -- pulses: the heartbeats /readyz reads, kept in Redis so that every web pod sees every process ---------

PULSES_KEY = "trainyard:pulses"


def pulse(process: str) -> None:
    """Record that `process` ("watcher", "scheduler") did its work just now (never raises)."""
    try:
        _redis().hset(PULSES_KEY, process, time.time())
    except redis.RedisError:
        log.debug("pulse of %s lost", process)


def last_pulses() -> dict[str, float]:
    """When each process last pulsed (Unix time); raises redis.RedisError when Redis does not answer."""
    return {str(name): float(when) for name, when in _redis().hgetall(PULSES_KEY).items()}
