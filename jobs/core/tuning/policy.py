"""The tuner's decision: a pure function from a diagnosis, the job's allocation, its tuning history and its
limits (declared range, tenant's free quota) to one action, so every rule is tested without a cluster.

Rules, in order:

1. A change under evaluation (`History.pending`) is judged once the new allocation is stable: slower than
   before by more than `regression_tolerance` → `revert` to the previous allocation (and never try that
   direction again); otherwise `keep`.
2. At most `max_changes` changes (scales and reverts) per job, at most one per `window_seconds`, and none
   before the job is stable (`hold`).
3. A stable job: `cpu_bound` gets more CPU per learner (double, capped by the range and the quota), or,
   at the top of its CPU range, one more learner when its learner range and the quota allow;
   `over_provisioned` gives CPU back (to 1.5x what it uses, not below the range); `scaling_limited` drops
   a learner; `communication_bound` (jobs.core.tuning.scaling) goes to the fewest learners that were as
     fast, and holds rather than grow again. Never back down from a kept `cpu_up` / `learners_up`: its
     speed-up was measured, and a node too busy to let the job use its CPU must not talk the tuner out of
     it (a flip-flop that costs two restarts). Memory pressure, GPU-bound and unknown hold: there is
     nothing in the range to change.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from jobs.core.tuning.detector import Diagnosis

Action = Literal["hold", "scale", "revert", "keep"]
CPU_GRAIN = 100  # millicores: allocations move in tenths of a CPU
UNDOES_GAIN = {"cpu_down": "cpu_up", "learners_down": "learners_up"}
"""A direction that would give back what a kept change in the other direction measured as a gain."""


@dataclass(frozen=True)
class Allocation:
    """Per-learner CPU and the number of learners: what the tuner may change."""

    cpu_millis: int
    learners: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Pending:
    """A change applied and not yet judged: where it came from and how fast the job was before."""

    previous: Allocation
    direction: str
    speed_before: float
    at: float


@dataclass(frozen=True)
class History:
    """What the tuner did to this job so far (rebuilt from its tuning JobEvents)."""

    changes: int = 0
    last_change_at: float | None = None
    pending: Pending | None = None
    reverted: frozenset[str] = frozenset()
    kept: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Limits:
    """The bounds of any change: the declared ranges (None: not tunable), what the tenant's quota leaves
    free beyond the job's current allocation, and the hysteresis settings."""

    cpu_range: tuple[int, int] | None
    learners_range: tuple[int, int] | None
    free_cpu_millis: int
    free_memory_mib: int = 0
    free_gpus: int = 0
    memory_mib: int = 0
    gpus: int = 0
    max_changes: int = 3
    window_seconds: float = 120.0
    regression_tolerance: float = 0.05


@dataclass(frozen=True)
class Decision:
    """One action, the allocation it moves to (for scale and revert), why, and the numbers behind it."""

    action: Action
    reason: str
    target: Allocation | None = None
    direction: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    code: str = ""
    """Why a `hold` holds, in one word (pending, max_changes, window, unstable, no_change, reverted, kept), so
    the service records a hold only when its cause changes."""


def _down(value: int) -> int:
    return value // CPU_GRAIN * CPU_GRAIN


def _up(value: float) -> int:
    return int(-(-value // CPU_GRAIN) * CPU_GRAIN)


def decide(
    *, diagnosis: Diagnosis, current: Allocation, history: History, limits: Limits, now: float
) -> Decision:
    """The one thing to do now about a job (see the module's rules)."""
    evidence: dict[str, Any] = {
        "diagnosis": diagnosis.bottleneck,
        "stable": diagnosis.stable,
        **diagnosis.evidence,
        "current": current.as_dict(),
        "changes": history.changes,
    }
    pending = history.pending
    if pending is not None:
        if not diagnosis.stable or diagnosis.speed is None:
            why = f"waiting for the new allocation to settle ({diagnosis.reason})"
            return _hold(why, "pending", evidence)
        ratio = diagnosis.speed / pending.speed_before if pending.speed_before > 0 else 1.0
        evidence |= {
            "speed_before": pending.speed_before,
            "speed_after": diagnosis.speed,
            "speed_ratio": round(ratio, 4),
        }
        if ratio < 1.0 - limits.regression_tolerance:
            why = f"{pending.direction} made it slower ({ratio:.2f}x): back to the previous allocation"
            return Decision("revert", why, pending.previous, pending.direction, evidence)
        why = f"{pending.direction} kept ({ratio:.2f}x as fast)"
        return Decision("keep", why, None, pending.direction, evidence)
    if history.changes >= limits.max_changes:
        why = f"already changed {history.changes} times (at most {limits.max_changes})"
        return _hold(why, "max_changes", evidence)
    if history.last_change_at is not None and now - history.last_change_at < limits.window_seconds:
        wait = limits.window_seconds - (now - history.last_change_at)
        return _hold(f"last change too recent ({wait:.0f} s of the window left)", "window", evidence)
    if not diagnosis.stable:
        return _hold(f"not stable yet: {diagnosis.reason}", "unstable", evidence)
    target, direction, why = _propose(diagnosis, current, limits)
    if target is None or target == current:
        return _hold(f"{diagnosis.bottleneck}: {why}", "no_change", evidence)
    if direction in history.reverted:
        return _hold(f"{diagnosis.bottleneck}: {direction} was reverted before", "reverted", evidence)
    # A communication-bound verdict is itself a measurement of the kept change (the speed at both learner
    # counts: it gained too little for its learners), not a busy node's say-so, so it may undo it.
    if UNDOES_GAIN.get(direction) in history.kept and diagnosis.bottleneck != "communication_bound":
        why = f"{diagnosis.bottleneck}: {direction} would give back a kept {UNDOES_GAIN[direction]}'s gain"
        return _hold(why, "kept", evidence)
    evidence["target"] = target.as_dict()
    return Decision(
        "scale", f"{diagnosis.bottleneck} ({diagnosis.reason}): {why}", target, direction, evidence
    )


def _hold(reason: str, code: str, evidence: dict[str, Any]) -> Decision:
    return Decision("hold", reason, evidence=evidence, code=code)


def _propose(diagnosis: Diagnosis, current: Allocation, limits: Limits) -> tuple[Allocation | None, str, str]:
    """The allocation the diagnosis calls for within the range and quota, its direction and why."""
    cpu, learners = current.cpu_millis, current.learners
    kind = diagnosis.bottleneck
    if kind == "cpu_bound":
        if limits.cpu_range is not None and cpu < limits.cpu_range[1]:
            room = limits.free_cpu_millis // learners
            new = min(limits.cpu_range[1], cpu * 2, _down(cpu + room))
            if new > cpu:
                return Allocation(new, learners), "cpu_up", f"CPU {cpu}m -> {new}m per learner"
            return None, "", f"the tenant's quota leaves {limits.free_cpu_millis}m CPU free"
        if limits.learners_range is not None and learners < limits.learners_range[1]:
            if _fits_one_more(cpu, limits):
                return Allocation(cpu, learners + 1), "learners_up", f"learners {learners} -> {learners + 1}"
            return None, "", "the tenant's quota has no room for another learner"
        return None, "", "already at the top of its range"
    if kind == "over_provisioned" and limits.cpu_range is not None:
        used = float(diagnosis.evidence.get("cpu_used_millis") or 0)
        new = max(limits.cpu_range[0], _up(used * 1.5))
        if new < cpu:
            return (
                Allocation(new, learners),
                "cpu_down",
                f"CPU {cpu}m -> {new}m per learner (uses {used:.0f}m)",
            )
        return None, "", "already at the bottom of its range"
    if (
        kind == "scaling_limited"
        and limits.learners_range is not None
        and learners > limits.learners_range[0]
    ):
        return Allocation(cpu, learners - 1), "learners_down", f"learners {learners} -> {learners - 1}"
    if kind == "communication_bound" and limits.learners_range is not None:
        wanted = int(diagnosis.evidence.get("learners_target") or learners)
        new = max(limits.learners_range[0], min(learners, wanted))
        if new < learners:
            return Allocation(cpu, new), "learners_down", f"learners {learners} -> {new}"
        return None, "", "more learners did not help; holding at this count"
    return None, "", "nothing in the declared range addresses it"


def _fits_one_more(cpu_millis: int, limits: Limits) -> bool:
    return (
        cpu_millis <= limits.free_cpu_millis
        and limits.memory_mib <= limits.free_memory_mib
        and limits.gpus <= limits.free_gpus
    )
