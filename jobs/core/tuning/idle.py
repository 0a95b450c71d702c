"""Idle GPUs: a pure reading of a GPU job's utilisation looks, so it is tested on recorded DCGM series
without a cluster or a database.

A job's GPUs are *idle* when every look over the last `window_seconds` saw every learner's GPUs below
`threshold` (0-1) and those looks cover the whole window: one busy learner, or a look with no reading (the
exporter did not answer, a learner not yet reporting), ends the idle spell, so a job is never called idle
on missing data. The platform flags an idle job on its page and to its owner, and halts it after a grace
period where the tenant's policy says so (jobs/idlegpu.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuLook:
    """One telemetry look at a GPU job: the busiest learner's GPU utilisation (0-1), None when any learner
    had no reading."""

    ts: float
    gpu_util: float | None


@dataclass(frozen=True)
class IdleVerdict:
    """Whether the GPUs are idle now, whether the latest look saw them busy (a flag is cleared only then:
    a missing reading is no evidence of work), since when (the first look of the trailing idle spell), and
    the spell's numbers."""

    idle: bool
    busy: bool
    since: float | None
    seconds: float
    peak: float | None
    looks: int
    reason: str


def busiest(utils: Sequence[float | None]) -> float | None:
    """One look's job-level reading from its learners': the busiest, None when any is missing."""
    if not utils or any(u is None for u in utils):
        return None
    return max(u for u in utils if u is not None)


def idle_verdict(looks: Sequence[GpuLook], *, threshold: float, window_seconds: float) -> IdleVerdict:
    """Judge the trailing run of looks (oldest first) below `threshold`: idle once it spans the window."""
    run: list[GpuLook] = []
    for look in looks:
        if look.gpu_util is not None and look.gpu_util < threshold:
            run.append(look)
        else:
            run = []
    if not run:
        last = looks[-1] if looks else None
        if last is None:
            why = "no GPU reading yet"
        elif last.gpu_util is None:
            why = "the latest look has no GPU reading"
        else:
            why = f"GPUs {last.gpu_util:.0%} busy (idle below {threshold:.0%})"
        return IdleVerdict(False, last is not None and last.gpu_util is not None, None, 0.0, None, 0, why)
    seconds = run[-1].ts - run[0].ts
    peak = max(look.gpu_util for look in run if look.gpu_util is not None)
    if seconds < window_seconds:
        why = f"below {threshold:.0%} for {seconds:.0f} s of the {window_seconds:.0f} s window"
        return IdleVerdict(False, False, run[0].ts, seconds, peak, len(run), why)
    why = f"GPUs below {threshold:.0%} (at most {peak:.0%}) for {seconds:.0f} s"
    return IdleVerdict(True, False, run[0].ts, seconds, peak, len(run), why)
