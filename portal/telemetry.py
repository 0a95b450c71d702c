"""The `/metrics` collector: jobs by state and queues per tenant from PostgreSQL, plus what every process
recorded in Redis through `common.telemetry`."""

from __future__ import annotations

import time
from collections.abc import Iterator

from django.db.models import Count, Min
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.telemetry import COUNTERS, GAUGES, snapshot


class TrainyardCollector(Collector):
    """Jobs by state, queue length and oldest wait per tenant (from PostgreSQL), plus what the other
    processes recorded in Redis. With `tenant_names` False the queue series are totals over all tenants,
    with no tenant label (what an anonymous scrape gets)."""

    def __init__(self, *, tenant_names: bool = True) -> None:
        self.tenant_names = tenant_names

    def collect(self) -> Iterator[Metric]:
        from jobs.core.states import JobStatus
        from jobs.models import Job
        from tenants.models import Tenant

        by_state = GaugeMetricFamily("trainyard_jobs", "Jobs by state", labels=["state"])
        counts = dict(Job.objects.values_list("status").annotate(n=Count("id")))
        for state in JobStatus.values:
            by_state.add_metric([state], counts.get(state, 0))
        yield by_state
        now = time.time()
        if not self.tenant_names:
            total = Job.objects.waiting().aggregate(n=Count("id"), first=Min("created_at"))
            first = total["first"]
            yield GaugeMetricFamily("trainyard_queue_length", "Waiting jobs", value=total["n"])
            yield GaugeMetricFamily(
                "trainyard_queue_oldest_wait_seconds",
                "Age of the oldest waiting job",
                value=max(0.0, now - first.timestamp()) if first else 0.0,
            )
            yield from self._recorded()
            return
        queue = GaugeMetricFamily("trainyard_queue_length", "Waiting jobs per tenant", labels=["tenant"])
        oldest = GaugeMetricFamily(
            "trainyard_queue_oldest_wait_seconds",
            "Age of the oldest waiting job per tenant",
            labels=["tenant"],
        )
        rows = Job.objects.waiting().values("tenant__slug").annotate(n=Count("id"), first=Min("created_at"))
        waiting = {row["tenant__slug"]: row for row in rows}
        # Every active tenant has a sample (0 when nothing waits), so "no queue" is 0, not a missing series.
        for slug in sorted(
            set(Tenant.objects.filter(active=True).values_list("slug", flat=True)) | set(waiting)
        ):
            row = waiting.get(slug)
            queue.add_metric([slug], row["n"] if row else 0)
            oldest.add_metric([slug], max(0.0, now - row["first"].timestamp()) if row else 0.0)
        yield queue
        yield oldest
        yield from self._recorded()

    def _recorded(self) -> Iterator[Metric]:
        recorded = snapshot()
        counters = {key.partition(":")[2] for key in recorded if key.startswith("counter:")} | set(COUNTERS)
        gauges = {key.partition(":")[2] for key in recorded if key.startswith("gauge:")} | set(GAUGES)
        for name in sorted(counters):
            help_text = COUNTERS.get(name, f"Trainyard {name.replace('_', ' ')}")
            counter = CounterMetricFamily(f"trainyard_{name}", help_text)
            counter.add_metric([], recorded.get(f"counter:{name}", 0.0))
            yield counter
        for name in sorted(gauges):
            help_text = GAUGES.get(name, f"Trainyard {name.replace('_', ' ')}")
            yield GaugeMetricFamily(f"trainyard_{name}", help_text, value=recorded.get(f"gauge:{name}", 0.0))
