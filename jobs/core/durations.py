"""How long a job is expected to run, for its ETA and for the ETAs of the jobs behind it.

Why: backfill only trusts ``max_runtime`` (a promise the kubelet enforces), but most jobs declare none,
and a queue whose ETAs are all "unknown" tells users nothing. Finished jobs of the same tenant say how
long a job like this one usually takes: first those with the same name (the same experiment resubmitted),
else those of the same shape (learners, GPUs, CPU, memory). Pure: the caller hands in the finished runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

JobShape = tuple[int, int, int, int]
"""(learners, GPUs, CPU millicores, memory MiB) per learner: what a job asks for."""


@dataclass(frozen=True, slots=True)
class Duration:
    """An expected run time in seconds with its plausible range (``low <= expected <= high``) and where
    it comes from (``basis``, shown to users as the ground of the estimate)."""

    expected: float
    low: float
    high: float
    basis: str


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """One finished run of a job: whose it was, its name and shape, and how many seconds it ran."""

    tenant: str
    name: str
    shape: JobShape
    seconds: float


def _rank(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p`` percentile of sorted ``values``."""
    return values[max(0, math.ceil(p * len(values)) - 1)]


class DurationModel:
    """Learned run times per (tenant, name) and per (tenant, shape): median, p25 and p75."""

    def __init__(self, runs: Iterable[FinishedRun]) -> None:
        self.by_name: dict[tuple[str, str], list[float]] = {}
        self.by_shape: dict[tuple[str, JobShape], list[float]] = {}
        for run in runs:
            if run.seconds > 0:
                self.by_name.setdefault((run.tenant, run.name), []).append(run.seconds)
                self.by_shape.setdefault((run.tenant, run.shape), []).append(run.seconds)
        for samples in (*self.by_name.values(), *self.by_shape.values()):
            samples.sort()

    def learned(self, *, tenant: str, name: str, shape: JobShape) -> Duration | None:
        """The median (p25..p75) of the tenant's finished runs of ``name``, else of ``shape``; None if
        it has neither."""
        samples = self.by_name.get((tenant, name))
        basis = "earlier runs of the same name"
        if not samples:
            samples = self.by_shape.get((tenant, shape))
            basis = "earlier runs of the same size"
        if not samples:
            return None
        basis = f"median of {len(samples)} {basis}"
        return Duration(_rank(samples, 0.5), _rank(samples, 0.25), _rank(samples, 0.75), basis)

    def estimate(
        self, *, tenant: str, name: str, shape: JobShape, max_runtime: float | None
    ) -> Duration | None:
        """The job's expected run time: its own ``max_runtime`` when set (a hard upper bound; the low end
        comes from its learned runs when they are shorter), else the learned one, else None (unknown)."""
        learned = self.learned(tenant=tenant, name=name, shape=shape)
        if max_runtime is None or max_runtime <= 0:
            return learned
        low = min(learned.low, max_runtime) if learned is not None else max_runtime
        return Duration(float(max_runtime), low, float(max_runtime), "max_runtime")
