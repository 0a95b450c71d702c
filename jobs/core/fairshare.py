"""Fair share over time: what each tenant held in the recent past, decayed with a half-life.

Why: the weighted dominant share alone looks only at what a tenant holds now, so a team that kept the
cluster busy all night starts the morning level with one that ran nothing. With a half-life ``h`` (setting
``FAIR_SHARE_HALF_LIFE_SECONDS``; Slurm's ``PriorityDecayHalfLife``, Kueue's ``usageHalfLifeTime``) each
tenant also carries its *decayed usage*: the exponentially weighted mean of what it held in the past,

    decayed = (1 / tau) * integral over t <= now of held(t) * 2 ** (-(now - t) / h) dt,   tau = h / ln 2

(``tau`` is the integral of the weight itself, so the weights sum to one). It is in the units of what is
held (GPUs, millicores, MiB): a tenant that has held 8 GPUs for ever has 8; one that held 8 GPUs until one
half-life ago has 4, until two half-lives ago 2. One run of ``held`` from ``start`` to ``end`` contributes,
in closed form, ``held * (2 ** (-(now - end) / h) - 2 ** (-(now - start) / h))``.

Admission adds it to what the tenant holds now (:class:`jobs.core.admission.TenantState` ``decayed``).
Pure and Django-free: the scheduling cycle feeds it runs read from the database (jobs/fairshare.py), the
trace simulator its own finished and running jobs (:class:`History`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.resources import Shape

Triple = tuple[float, float, float]
"""Decayed usage: mean GPUs, millicores and MiB held, weighted towards now."""

NONE: Triple = (0.0, 0.0, 0.0)

HORIZON_HALF_LIVES = 10
"""Runs that ended this many half-lives ago weigh under 0.1 % of a run now: callers may leave them out."""


@dataclass(frozen=True, slots=True)
class Run:
    """What a tenant's job held in all (every learner) from ``start`` to ``end`` (None: still running)."""

    tenant: str
    start: float
    end: float | None
    held: Shape


def weight(t: float, *, now: float, half_life: float) -> float:
    """How much an instant ``t`` counts at ``now``: 1 now, 1/2 one half-life earlier (the future counts as now)."""
    return 0.5 ** (max(0.0, now - t) / half_life)


def contribution(run: Run, *, now: float, half_life: float) -> Triple:
    """One run's part of its tenant's decayed usage at ``now`` (closed form, see the module docstring)."""
    end = now if run.end is None else min(run.end, now)
    start = min(run.start, end)
    part = weight(end, now=now, half_life=half_life) - weight(start, now=now, half_life=half_life)
    gpus, cpu_millis, memory_mib = run.held
    return (gpus * part, cpu_millis * part, memory_mib * part)


def horizon(*, now: float, half_life: float) -> float:
    """The earliest end of a run worth reading (:data:`HORIZON_HALF_LIVES` half-lives back)."""
    return now - HORIZON_HALF_LIVES * half_life


def decayed_usage(runs: Iterable[Run], *, now: float, half_life: float) -> dict[str, Triple]:
    """Each tenant's decayed usage at ``now`` from its runs; empty when ``half_life`` is 0 (fair share over
    time off: admission then sees only what tenants hold now)."""
    if half_life <= 0:
        return {}
    totals: dict[str, list[float]] = {}
    for run in runs:
        part = contribution(run, now=now, half_life=half_life)
        total = totals.setdefault(run.tenant, [0.0, 0.0, 0.0])
        for dim in range(3):
            total[dim] += part[dim]
    return {tenant: (total[0], total[1], total[2]) for tenant, total in totals.items()}


class History:
    """The decayed usage of finished runs, kept as they finish and decayed as the clock moves on.

    For the trace simulator, which asks at every cycle: summing every past run each time would cost the
    length of the trace; here all past runs decay by the same factor, so one running total per tenant does.
    """

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.as_of = 0.0
        self.totals: dict[str, list[float]] = {}

    def _advance(self, now: float) -> None:
        if now > self.as_of:
            factor = weight(self.as_of, now=now, half_life=self.half_life)
            for total in self.totals.values():
                total[:] = [value * factor for value in total]
            self.as_of = now

    def finish(self, run: Run) -> None:
        """Add a run that has ended (one that ended before the last call counts as of that call's clock)."""
        if self.half_life <= 0 or run.end is None:
            return
        self._advance(run.end)
        part = contribution(run, now=self.as_of, half_life=self.half_life)
        total = self.totals.setdefault(run.tenant, [0.0, 0.0, 0.0])
        for dim in range(3):
            total[dim] += part[dim]

    def at(self, now: float, running: Iterable[Run] = ()) -> dict[str, Triple]:
        """Each tenant's decayed usage at ``now``: the finished runs plus ``running`` (runs with no end yet)."""
        if self.half_life <= 0:
            return {}
        self._advance(now)
        out = decayed_usage(running, now=now, half_life=self.half_life)
        for tenant, total in self.totals.items():
            extra = out.get(tenant, NONE)
            out[tenant] = (total[0] + extra[0], total[1] + extra[1], total[2] + extra[2])
        return out
