"""Platform telemetry for Prometheus, across processes.

Web, worker and watcher are separate processes, so figures measured in one (an admission cycle's
duration, a pod event's lag, log lines stored, task failures) are kept in one Redis hash; the web
process's collector reads it, and the database, at scrape time. Redis holds only what may be lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from functools import cache

import redis
from django.conf import settings
from django.db.models import Count, Min
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
KEY = "trainyard:telemetry"


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


class TrainyardCollector(Collector):
    """Jobs by state, queue length and oldest wait per tenant (from PostgreSQL), plus what the other
    processes recorded in Redis."""

    def collect(self) -> Iterator[Metric]:
        from jobs.models import Job
        from jobs.states import JobStatus

        by_state = GaugeMetricFamily("trainyard_jobs", "Jobs by state", labels=["state"])
        counts = dict(Job.objects.values_list("status").annotate(n=Count("id")))
        for state in JobStatus.values:
            by_state.add_metric([state], counts.get(state, 0))
        yield by_state
        queue = GaugeMetricFamily("trainyard_queue_length", "Waiting jobs per tenant", labels=["tenant"])
        oldest = GaugeMetricFamily(
            "trainyard_queue_oldest_wait_seconds",
            "Age of the oldest waiting job per tenant",
            labels=["tenant"],
        )
        now = time.time()
        rows = Job.objects.waiting().values("tenant__slug").annotate(n=Count("id"), first=Min("created_at"))
        for row in rows:
            queue.add_metric([row["tenant__slug"]], row["n"])
            oldest.add_metric([row["tenant__slug"]], max(0.0, now - row["first"].timestamp()))
        yield queue
        yield oldest
        for key, value in sorted(snapshot().items()):
            kind, _, name = key.partition(":")
            if kind == "counter":
                counter = CounterMetricFamily(f"trainyard_{name}", f"Trainyard {name.replace('_', ' ')}")
                counter.add_metric([], value)
                yield counter
            elif kind == "gauge":
                yield GaugeMetricFamily(
                    f"trainyard_{name}", f"Trainyard {name.replace('_', ' ')}", value=value
                )
