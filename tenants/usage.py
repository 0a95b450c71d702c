"""Usage accounting: what tenants hold now, beside their quota, for pages, the API, submit checks, tuning
limits and the scheduler's snapshot alike (one source, so they can never disagree).

Jobs live in `jobs`, which imports tenants (never the reverse), so usage reads the Job model through the
reverse relation `Tenant.jobs` and the queryset methods the jobs app defines on it (`holding_resources`,
`waiting`): what holds resources is decided there, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from django.db.models import Count, F, QuerySet, Sum

from common.resources import Resources
from tenants.models import Tenant


@dataclass(frozen=True)
class Usage:
    """What a tenant's admitted jobs hold, how many jobs wait, and the checkpoint claims (count, GiB) its jobs
    hold, halted and finished ones included until they are deleted."""

    held: Resources = Resources.ZERO
    running_jobs: int = 0
    queued_jobs: int = 0
    claims: int = 0
    storage_gib: int = 0

    @property
    def gpus(self) -> int:
        return self.held.gpus

    @property
    def cpu_millis(self) -> int:
        return self.held.cpu_millis

    @property
    def memory_mib(self) -> int:
        return self.held.memory_mib


class _Jobs(Protocol):
    """The part of the jobs app's Job manager usage relies on."""

    def holding_resources(self) -> QuerySet[Any]: ...

    def waiting(self) -> QuerySet[Any]: ...

    def claims_by_tenant(self, tenant_ids: list[int]) -> dict[int, tuple[int, int]]: ...


def _jobs() -> _Jobs:
    """The Job model's manager, reached through the reverse relation (tenants may not import jobs)."""
    return cast(_Jobs, Tenant.jobs.field.model._default_manager)


def usage_by_tenant(tenants: Iterable[Tenant], *, queued: bool = True) -> dict[int, Usage]:
    """Usage of each of ``tenants`` by primary key, in three grouped queries however many there are;
    ``queued=False`` (the scheduler's snapshot, which counts no waiting jobs) leaves ``queued_jobs`` 0 and
    saves one."""
    ids = [t.pk for t in tenants]
    jobs = _jobs()
    held = (
        jobs.holding_resources()
        .filter(tenant_id__in=ids)
        .order_by()
        .values("tenant_id")
        .annotate(
            gpus=Sum(F("learners") * F("gpus")),
            cpu_millis=Sum(F("learners") * F("cpu_millis")),
            memory_mib=Sum(F("learners") * F("memory_mib")),
            running_jobs=Count("id"),
        )
    )
    waiting = (
        jobs.waiting().filter(tenant_id__in=ids).order_by().values("tenant_id").annotate(jobs=Count("id"))
    )
    held_by = {row["tenant_id"]: row for row in held}
    queued_by = {row["tenant_id"]: row["jobs"] for row in waiting} if queued else {}
    claims_by = jobs.claims_by_tenant(ids)
    usage: dict[int, Usage] = {}
    for pk in ids:
        row = held_by.get(pk)
        usage[pk] = Usage(
            held=Resources(row["gpus"], row["cpu_millis"], row["memory_mib"]) if row else Resources.ZERO,
            running_jobs=row["running_jobs"] if row else 0,
            queued_jobs=queued_by.get(pk, 0),
            claims=claims_by.get(pk, (0, 0))[0],
            storage_gib=claims_by.get(pk, (0, 0))[1],
        )
    return usage


def tenant_usage(tenant: Tenant) -> Usage:
    """Usage of one tenant: what its admitted jobs hold, how many of its jobs wait and the claims its jobs
    hold (three queries)."""
    return usage_by_tenant([tenant])[tenant.pk]
