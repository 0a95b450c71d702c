"""Usage accounting: what a tenant holds now, beside its quota.

Jobs live in `jobs`, which imports tenants (never the reverse), so usage is read through the reverse
relation `tenant.jobs` and the queryset methods the jobs app defines on it (`holding_resources`, `waiting`).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, F, Sum

from tenants.models import Tenant


@dataclass(frozen=True)
class Usage:
    """What a tenant's admitted jobs hold, and how many jobs wait."""

    gpus: int = 0
    cpu_millis: int = 0
    memory_mib: int = 0
    running_jobs: int = 0
    queued_jobs: int = 0


def tenant_usage(tenant: Tenant) -> Usage:
    """Sum the allocations of the tenant's admitted jobs and count its waiting ones (two queries)."""
    held = tenant.jobs.holding_resources().aggregate(
        gpus=Sum(F("learners") * F("gpus")),
        cpu_millis=Sum(F("learners") * F("cpu_millis")),
        memory_mib=Sum(F("learners") * F("memory_mib")),
        running_jobs=Count("id"),
    )
    return Usage(
        gpus=held["gpus"] or 0,
        cpu_millis=held["cpu_millis"] or 0,
        memory_mib=held["memory_mib"] or 0,
        running_jobs=held["running_jobs"] or 0,
        queued_jobs=tenant.jobs.waiting().count(),
    )
