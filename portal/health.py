"""Probes and metrics: /healthz (the process is alive), /readyz (its dependencies answer), /metrics."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from clusterio.errors import ClusterError
from jobs import cluster
from portal.telemetry import TrainyardCollector, _redis


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


def readyz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL, Redis and the cluster API all answer, else 503 naming what does not."""
    checks = {"database": _check_database(), "redis": _check_redis(), "cluster": _check_cluster()}
    body = {name: ("ok" if error is None else error) for name, error in checks.items()}
    ready = all(error is None for error in checks.values())
    return JsonResponse({"ready": ready, "checks": body}, status=200 if ready else 503)


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of the platform's figures (see portal/telemetry.py)."""
    registry = CollectorRegistry()
    registry.register(TrainyardCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
