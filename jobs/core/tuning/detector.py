"""The bottleneck detector: a pure function over a window of telemetry, so it is tested on recorded and
synthetic series without a cluster or a database.

A job is *stable* when it has enough looks with a speed and its speed varies little (coefficient of
variation at most `stable_cv`): before that, a change would be judged against noise (start-up, warm-up,
a neighbour's burst). A stable job is classified, first match wins:

* `memory_pressure`: peak memory within `memory_high` of the limit (the next step may be an OOM kill;
  memory is not tunable, so the tuner only reports it);
* `gpu_bound`: GPUs busy at least `gpu_high` of the time (healthy: the expensive part is the limit);
* `cpu_bound`: CPU used at least `cpu_high` of the limit (more CPU should help);
* `over_provisioned`: CPU used at most `cpu_low` of the limit (CPU could go to other jobs);
* `scaling_limited`: several learners, none CPU- or GPU-bound, and (when a single-learner rate is
  known) each learner at most `scaling_efficiency` as fast as one alone: they wait on each other;
* `unknown`: none of these (input I/O, sleeps, a mix).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

BOTTLENECKS = (
    "cpu_bound", "over_provisioned", "memory_pressure", "gpu_bound", "scaling_limited", "communication_bound",
    "unknown",
)  # fmt: skip
"""communication_bound is not the detector's: jobs.core.tuning.scaling sets it from speeds across learner
counts."""


@dataclass(frozen=True)
class Point:
    """One look at a whole job: mean per-learner CPU and memory against the per-learner limits, the job's
    speed (summed over learners; None when it printed none), mean GPU use (None where not exposed)."""

    ts: float
    cpu_used: float
    cpu_limit: float
    memory_used: float
    memory_limit: float
    speed: float | None
    learners: int = 1
    gpu_util: float | None = None


@dataclass(frozen=True)
class Thresholds:
    """The detector's knobs; the defaults are what docs/tuning.md describes."""

    min_points: int = 5
    stable_cv: float = 0.15
    cpu_high: float = 0.85
    cpu_low: float = 0.35
    memory_high: float = 0.9
    gpu_high: float = 0.8
    scaling_efficiency: float = 0.7


@dataclass(frozen=True)
class Diagnosis:
    """Whether the window is stable, the bottleneck class, and the numbers that led there."""

    stable: bool
    bottleneck: str
    evidence: dict[str, float | int | None] = field(default_factory=dict)
    reason: str = ""

    @property
    def speed(self) -> float | None:
        """The window's speed: its median look (a neighbour's burst on a shared node moves it less than the
        mean), else the mean for evidence recorded before the median was."""
        value = self.evidence.get("speed_median", self.evidence.get("speed_mean"))
        return float(value) if value is not None else None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _cv(values: Sequence[float]) -> float:
    mean = _mean(values)
    if mean <= 0:
        return math.inf
    variance = sum((v - mean) ** 2 for v in values) / len(values)
    return math.sqrt(variance) / mean


def diagnose(
    points: Sequence[Point],
    *,
    thresholds: Thresholds | None = None,
    single_learner_speed: float | None = None,
) -> Diagnosis:
    """Classify the job's bottleneck over `points` (oldest first, one allocation), with evidence."""
    t = thresholds or Thresholds()
    speeds = [p.speed for p in points if p.speed is not None]
    evidence: dict[str, float | int | None] = {"points": len(points), "points_with_speed": len(speeds)}
    if len(speeds) < t.min_points:
        return Diagnosis(False, "unknown", evidence, f"{len(speeds)} looks with a speed, need {t.min_points}")
    cv = _cv(speeds)
    cpu_util = _mean([p.cpu_used / p.cpu_limit for p in points if p.cpu_limit > 0] or [0.0])
    memory_peak = max((p.memory_used / p.memory_limit for p in points if p.memory_limit > 0), default=0.0)
    gpu = [p.gpu_util for p in points if p.gpu_util is not None]
    learners = points[-1].learners
    evidence |= {
        "speed_mean": round(_mean(speeds), 3),
        "speed_median": round(statistics.median(speeds), 3),
        "speed_cv": round(cv, 4) if math.isfinite(cv) else None,
        "cpu_used_millis": round(_mean([p.cpu_used for p in points])),
        "cpu_limit_millis": round(points[-1].cpu_limit),
        "cpu_util": round(cpu_util, 4),
        "memory_peak_util": round(memory_peak, 4),
        "gpu_util": round(_mean(gpu), 4) if gpu else None,
        "learners": learners,
        "window_seconds": round(points[-1].ts - points[0].ts, 1),
    }
    if not math.isfinite(cv) or cv > t.stable_cv:
        return Diagnosis(
            False, "unknown", evidence, f"speed varies {cv:.0%} (stable below {t.stable_cv:.0%})"
        )
    if memory_peak >= t.memory_high:
        return Diagnosis(
            True, "memory_pressure", evidence, f"memory peaked at {memory_peak:.0%} of the limit"
        )
    if gpu and _mean(gpu) >= t.gpu_high:
        return Diagnosis(True, "gpu_bound", evidence, f"GPUs {_mean(gpu):.0%} busy")
    if cpu_util >= t.cpu_high:
        return Diagnosis(True, "cpu_bound", evidence, f"CPU at {cpu_util:.0%} of the limit")
    if cpu_util <= t.cpu_low:
        return Diagnosis(True, "over_provisioned", evidence, f"CPU at {cpu_util:.0%} of the limit")
    if learners > 1:
        per_learner = _mean(speeds) / learners
        if single_learner_speed:
            efficiency = per_learner / single_learner_speed
            evidence["scaling_efficiency"] = round(efficiency, 4)
            if efficiency <= t.scaling_efficiency:
                return Diagnosis(
                    True, "scaling_limited", evidence, f"each learner {efficiency:.0%} as fast as one alone"
                )
        else:
            return Diagnosis(
                True, "scaling_limited", evidence, f"{learners} learners, CPU only {cpu_util:.0%} used"
            )
    return Diagnosis(True, "unknown", evidence, f"CPU at {cpu_util:.0%}, no limit in sight")
