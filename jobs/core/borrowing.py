"""Quota with borrowing: a tenant's nominal (guaranteed) quota, what it may borrow, and its cohort.

Kueue's semantics (ClusterQueue ``nominalQuota``, ``borrowingLimit``, ``cohort``), without lending limits
and without reclaim: per resource (GPUs, CPU, memory) a tenant may always use up to its nominal quota; it
may go above it by at most its borrowing limit (None: no limit of its own), and only while its cohort's
total use stays within the sum of the cohort members' nominal quotas, so that it borrows only what other
members leave unused. A limit of 0 (the default) is a hard cap, as before borrowing existed. Tenants with
a blank cohort form one cohort (the whole cluster); tenants of different cohorts never lend to each other.

Pure and Django-free: the admission cycle (:mod:`jobs.core.admission`) asks :class:`Cohorts` for each job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from common.resources import Shape

Limit = tuple[int | None, int | None, int | None]
"""A borrowing limit per resource (gpus, cpu_millis, memory_mib); None: limited only by the cohort."""

NO_BORROWING: Limit = (0, 0, 0)
# (label in usage reasons, unit, noun after an amount)
_DIMS = (("GPU", "", "GPUs"), ("CPU", "m", "CPU"), ("memory", " MiB", "memory"))


class _Tenant(Protocol):
    """What the check reads of an admission ``TenantState``."""

    @property
    def name(self) -> str: ...
    @property
    def nominal(self) -> Shape: ...
    @property
    def borrowing_limit(self) -> Limit: ...
    @property
    def cohort(self) -> str: ...


def over_nominal(used: Sequence[int], nominal: Shape) -> bool:
    """Whether ``used`` exceeds ``nominal`` in any resource: a job admitted into that state is borrowed."""
    return any(amount > allowed for amount, allowed in zip(used, nominal, strict=True))


class Cohorts:
    """The cohorts of one admission cycle: their members and the sum of their nominal quotas."""

    def __init__(self, tenants: Iterable[_Tenant]) -> None:
        self.members: dict[str, list[str]] = {}
        self.nominal: dict[str, Shape] = {}
        # Per tenant name, the tenant and its ceiling: both stay the same while the cohorts exist.
        self.ceilings: dict[str, tuple[_Tenant, Shape]] = {}
        for tenant in tenants:
            self.members.setdefault(tenant.cohort, []).append(tenant.name)
            total = self.nominal.get(tenant.cohort, (0, 0, 0))
            self.nominal[tenant.cohort] = (
                total[0] + tenant.nominal[0],
                total[1] + tenant.nominal[1],
                total[2] + tenant.nominal[2],
            )

    def ceiling(self, tenant: _Tenant) -> Shape:
        """The most ``tenant`` may ever hold: nominal plus borrowing limit, capped by its cohort's nominal."""
        cached = self.ceilings.get(tenant.name)
        if cached is not None and cached[0] is tenant:
            return cached[1]
        cohort = self.nominal[tenant.cohort]
        ceiling: Shape = tuple(  # type: ignore[assignment]
            allowed
            if limit == 0
            else min(cohort[dim], allowed + (limit if limit is not None else cohort[dim]))
            for dim, (allowed, limit) in enumerate(zip(tenant.nominal, tenant.borrowing_limit, strict=True))
        )
        self.ceilings[tenant.name] = (tenant, ceiling)
        return ceiling

    def cohort_used(
        self, cohort: str, used: Mapping[str, Sequence[int]], held: Mapping[str, Shape]
    ) -> list[int]:
        """What the members of ``cohort`` hold now, with the resources held for a reserved job."""
        total = [0, 0, 0]
        for member in self.members.get(cohort, ()):
            for amounts in (used[member], held.get(member, (0, 0, 0))):
                for dim in range(3):
                    total[dim] += amounts[dim]
        return total

    def check(
        self,
        tenant: _Tenant,
        need: Shape,
        used: Mapping[str, Sequence[int]],
        held: Mapping[str, Shape],
    ) -> tuple[str, bool] | None:
        """Why ``tenant``'s quota stops a job needing ``need`` in all and whether it never can start, or
        None when the quota lets it start (within nominal, or borrowing what its cohort has to lend)."""
        ceiling = self.ceiling(tenant)
        in_use = used[tenant.name]
        reserved = held.get(tenant.name, (0, 0, 0))
        cohort_used: list[int] | None = None
        for dim, (label, unit, noun) in enumerate(_DIMS):
            needed, allowed, top = need[dim], tenant.nominal[dim], ceiling[dim]
            if needed > top:
                beyond = "" if top == allowed else f" (+{top - allowed}{unit} it may borrow)"
                return (
                    f"needs {needed}{unit} {label} > tenant quota {allowed}{unit}{beyond}; can never start",
                    True,
                )
            total = in_use[dim] + reserved[dim] + needed
            if total <= allowed:
                continue
            extra = f"; {reserved[dim]}{unit} held for the reserved job" if reserved[dim] else ""
            if top == allowed:
                return (
                    f"tenant {label} quota {in_use[dim]}{unit}/{allowed}{unit} in use (needs {needed}{unit}{extra})",
                    False,
                )
            limit = tenant.borrowing_limit[dim]
            if limit is not None and total > allowed + limit:
                return (
                    f"tenant {label} borrowing limit reached: {in_use[dim]}{unit} in use of nominal "
                    f"{allowed}{unit} + {limit}{unit} borrowable (needs {needed}{unit}{extra})",
                    False,
                )
            if cohort_used is None:
                cohort_used = self.cohort_used(tenant.cohort, used, held)
            lendable = self.nominal[tenant.cohort][dim] - cohort_used[dim]
            if needed > lendable:
                return (
                    f"tenant over its nominal {allowed}{unit} {noun} and the cohort has "
                    f"{'none' if lendable <= 0 else f'only {lendable}{unit}'} to lend (needs {needed}{unit})",
                    False,
                )
        return None
