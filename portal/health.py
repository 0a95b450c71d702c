"""Probes and metrics: /healthz (the process is alive), /readyz (its dependencies answer, the watcher and the
scheduler cycle pulse), /metrics, and the heartbeat files that the worker's, beat's and watcher's exec
probes read (they serve no HTTP).

A worker touches `<HEARTBEAT_DIR>/trainyard-worker.alive` when it is ready and at each of its event
heartbeats (every 2 s, from its consumer loop); beat touches `trainyard-beat.alive` when it starts and
each time it sends a task (the scheduler cycle every SCHEDULE_INTERVAL_SECONDS). A probe is then "is the
file younger than N seconds" (deploy/k8s/base/worker.yaml, beat.yaml). Celery imports this module in both
(CELERY_IMPORTS), which connects the handlers; with HEARTBEAT_DIR empty (the default) they do nothing.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

import redis
from celery import signals
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from common.leader import leader_of
from common.telemetry import WEBSOCKET_CLIENTS, _redis, heartbeat, heartbeat_path, last_pulses
from jobs import cluster
from jobs.cluster import ClusterError
from portal.telemetry import TrainyardCollector

log = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> HttpResponse:
    """The process is alive; says nothing about its dependencies."""
    return HttpResponse("ok", content_type="text/plain")


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def _check_redis() -> str | None:
    try:
        _redis().ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def _check_cluster() -> str | None:
    try:
        cluster.cluster().ping()
    except ClusterError as exc:
        return str(exc)
    return None


def _check_pulses() -> dict[str, str | None]:
    """The processes without HTTP that /readyz vouches for: each must have pulsed (common.telemetry.pulse)
    within its READY_*_STALE_SECONDS. A watcher that died leaves the live views frozen and finished jobs
    running; a scheduler cycle that stopped leaves every job queued."""
    limits = {
        "watcher": settings.READY_WATCHER_STALE_SECONDS,
        "scheduler": settings.READY_SCHEDULER_STALE_SECONDS,
    }
    limits = {name: limit for name, limit in limits.items() if limit > 0}
    try:
        pulses = last_pulses()
    except redis.RedisError as exc:
        return dict.fromkeys(limits, f"unknown: Redis does not answer ({type(exc).__name__})")
    now = time.time()
    found: dict[str, str | None] = {}
    for name, limit in limits.items():
        when = pulses.get(name)
        if when is None:
            found[name] = "no heartbeat yet"
        elif now - when > limit:
            found[name] = f"no heartbeat for {now - when:.0f} s (limit {limit:.0f} s)"
        else:
            found[name] = None
    return found


def _leaders() -> dict[str, str | None]:
    """Which watcher and which beat lead now (common.leader: host, which is the pod's name, and pid), read
    from the server's locks; None for one that nobody leads or while the database cannot say. Informative
    only: a dead watcher shows in its pulse, a dead beat in the scheduler's."""
    found: dict[str, str | None] = {}
    for name in ("watcher", "beat"):
        try:
            found[name] = leader_of(name)
        except DatabaseError:
            found[name] = None
    return found


def readyz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL, Redis and the cluster API answer and the watcher and the scheduler cycle have
    pulsed lately, else 503 naming what does not. With leader election, it also names the leaders."""
    checks = {"database": _check_database(), "redis": _check_redis(), "cluster": _check_cluster()}
    checks |= _check_pulses()
    body = {name: ("ok" if error is None else error) for name, error in checks.items()}
    ready = all(error is None for error in checks.values())
    answer: dict[str, Any] = {"ready": ready, "checks": body}
    if settings.LEADER_ELECTION and checks["database"] is None:
        answer["leaders"] = _leaders()
    return JsonResponse(answer, status=200 if ready else 503)


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of the platform's figures (see portal/telemetry.py).

    With METRICS_TOKEN set, only `Authorization: Bearer <METRICS_TOKEN>` gets in (401 otherwise) and sees
    the per-tenant series; without it anyone may scrape, and the queue series carry no tenant names."""
    expected = settings.METRICS_TOKEN
    if expected:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
            response = HttpResponse("metrics need Authorization: Bearer <METRICS_TOKEN>\n", status=401)
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    registry = CollectorRegistry()
    registry.register(TrainyardCollector(tenant_names=bool(expected)))
    registry.register(WEBSOCKET_CLIENTS)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


# -- heartbeats of the processes without HTTP ------------------------------------------------------


def _heartbeat_gone(process: str) -> None:
    path = heartbeat_path(process)
    if path is not None:
        path.unlink(missing_ok=True)


_beat_running = False
_worker_stopping = False


@signals.worker_ready.connect
@signals.heartbeat_sent.connect
def _worker_alive(**_: Any) -> None:
    if not _worker_stopping:  # the last heartbeat ("worker-offline") is sent on the way out
        heartbeat("worker")


@signals.worker_shutting_down.connect
def _worker_shutting_down(**_: Any) -> None:
    """A worker that is shutting down is no longer ready: its readiness probe fails at once."""
    global _worker_stopping
    _worker_stopping = True
    _heartbeat_gone("worker")


@signals.beat_init.connect
def _beat_started(**_: Any) -> None:
    global _beat_running
    _beat_running = True
    heartbeat("beat")


@signals.after_task_publish.connect
def _task_sent(**_: Any) -> None:
    if _beat_running:  # web and worker send tasks too; only beat's sends are its pulse
        heartbeat("beat")
