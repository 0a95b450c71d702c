"""Communication-bound distributed jobs: a pure reading of how a job's speed changed with its learner count,
so it is tested on recorded and synthetic series without a cluster.

Where a cluster exposes network bytes per step (cAdvisor's `container_network_*_bytes_total` per pod, read
from the kubelet or a Prometheus server) the time spent exchanging gradients could be measured directly;
the platform reads metrics.k8s.io and DCGM, which carry none, and kubesim has none, so it uses the fallback
the job itself provides: its speed (samples/s summed over learners, the detector's) at each learner count
it has run at, with the same CPU per learner. A job is *communication-bound* at `n` learners when a smaller
count `c` it ran at was nearly as fast: going from `c` to `d` learners must buy at least `min_gain` of the
ideal speed-up (`speed(d) >= speed(c) x (1 + min_gain x (d/c - 1))`); the tuner then shrinks it to the
fewest learners no larger count beats by that much, and does not grow it past them again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from jobs.core.tuning.detector import Diagnosis

KEEPS = ("memory_pressure",)
"""Bottlenecks that stand whatever the scaling says (memory is not in the range, and a restart will not
cure it)."""


@dataclass(frozen=True)
class ScalingVerdict:
    """Whether the job is communication-bound, the learner count it should run at, and why."""

    communication_bound: bool
    target: int | None
    reason: str
    speeds: dict[int, float]


def _pays(speeds: Mapping[int, float], low: int, high: int, min_gain: float) -> bool:
    """Whether `high` learners were enough faster than `low` to be worth their extra GPUs and CPUs."""
    return speeds[high] >= speeds[low] * (1.0 + min_gain * (high / low - 1.0))


def scaling_verdict(speeds: Mapping[int, float], *, current: int, min_gain: float = 0.2) -> ScalingVerdict:
    """Judge the speeds measured at each learner count (`current` among them): the fewest learners that no
    larger measured count beats by `min_gain` of the ideal speed-up."""
    measured = {n: s for n, s in speeds.items() if n > 0 and s > 0}
    if current not in measured or len(measured) < 2:
        return ScalingVerdict(False, None, "one learner count measured", dict(measured))
    counts = sorted(measured)
    target = next(c for c in counts if not any(_pays(measured, c, d, min_gain) for d in counts if d > c))
    table = ", ".join(f"{n} learners {measured[n]:.1f}/s" for n in counts)
    if target < current:
        why = f"{current} learners no faster than {target} by {min_gain:.0%} of the ideal ({table})"
        return ScalingVerdict(True, target, why, dict(measured))
    if target == current and counts[-1] > current:
        why = f"more learners than {current} measured no faster ({table})"
        return ScalingVerdict(True, current, why, dict(measured))
    return ScalingVerdict(False, None, f"scales ({table})", dict(measured))


def reclassify(diagnosis: Diagnosis, verdict: ScalingVerdict) -> Diagnosis:
    """The diagnosis as the tuner should act on it: `communication_bound` with the learner target in its
    evidence when the scaling says so (a stable job not under memory pressure), else unchanged."""
    if not verdict.communication_bound or not diagnosis.stable or diagnosis.bottleneck in KEEPS:
        return diagnosis
    evidence = dict(diagnosis.evidence)
    evidence["learners_target"] = verdict.target
    evidence |= {f"speed_at_{n}_learners": round(s, 3) for n, s in sorted(verdict.speeds.items())}
    return replace(diagnosis, bottleneck="communication_bound", evidence=evidence, reason=verdict.reason)
