"""The tuner in the trace simulator: a stated speed model, and one tuner look through the platform's own
detector and policy (:func:`jobs.core.tuning.detector.diagnose`, :func:`jobs.core.tuning.policy.decide`).

Why a model: the trace records how long each task ran at the CPU it requested, not how fast it would
have run with more. :class:`SpeedModel` says what more CPU buys, in the open, so the figures it gives are
read as "under this model", never as a measurement. The rules (docs/tuning.md, "In the simulator"):

* A GPU job's GPUs can use ``cpu_per_gpu_millis`` of CPU per GPU (its input pipeline needs that much to
  keep them fed). Its input pipeline scales with CPU as Amdahl's law with ``serial_fraction`` says
  (``S(c) = 1 / (s + (1 - s) / c)``, c in CPUs), and the GPUs cap it (a roofline): with ``c`` millicores it
  runs at ``speed = min(1, S(c) / S(need))`` of full speed, which for ``s = 0`` is ``min(1, c / need)``.
  :meth:`SpeedModel.fitted` takes ``s`` from the fit to measured runs of the example job
  (jobs/core/tuning/speed_fit.json, written by ``bench/tuner_bench.py --fit``); the trace
  run time is the time at the requested CPU, so its work is ``run_time x speed(requested)`` full-speed
  seconds. CPU-only jobs (no GPU) declare no range and are never tuned.
* Its declared range is ``cpu: [requested, range_factor x requested]`` (the example spec's shape: start at
  the bottom, may double), the top cut to the biggest node's CPU, in steps of 100m.
* The tuner looks at a job after ``window_seconds`` of an allocation: a window of telemetry points from
  the model (CPU used ``min(c, need)``, GPU utilization ``speed``, memory at half its limit, a constant
  speed) goes through the detector, then the policy decides with the same hysteresis (one change per
  window, at most ``max_changes``) and a free CPU of ``min(tenant quota left, free CPU on the job's
  node)``. After a ``keep`` it looks again ``interval_seconds`` later, after a hold one window later, and
  after ``max_holds`` holds in a row (or once the policy can do nothing more) not at all.
* A change resizes the job in place on its node and costs ``restart_seconds`` without progress (the
  checkpoint-restart: start-up and the steps since the last checkpoint); the real platform requeues the
  job and the scheduler re-admits it, which on a busy cluster may wait longer.
* Speed never drops with more CPU in this model, so a revert cannot happen here (the policy's revert
  rule is tested in tests/jobs/test_tuning_policy.py and measured by bench/tuner_bench.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jobs.core.tuning.detector import Diagnosis, Point, Thresholds, diagnose
from jobs.core.tuning.policy import CPU_GRAIN, Allocation, Decision, History, Limits, Pending, decide
from jobs.core.tuning.speedfit import FIT_PATH, load_fit

FULL_SPEED = 1000.0
"""Samples/s of a job at full speed in the model's telemetry: only ratios matter."""


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """The simulator's speed model and tuner settings (defaults: docs/tuning.md's production values)."""

    cpu_per_gpu_millis: int = 8000
    range_factor: float = 2.0
    restart_seconds: float = 60.0
    window_seconds: float = 120.0
    telemetry_seconds: float = 10.0
    interval_seconds: float = 30.0
    max_changes: int = 3
    max_holds: int = 3
    regression_tolerance: float = 0.05
    serial_fraction: float = 0.0
    fit_source: str = "stated: linear in CPU up to the GPUs' need (serial fraction 0)"

    @classmethod
    def fitted(cls, path: Path = FIT_PATH, **overrides: Any) -> SpeedModel:
        """The model with the serial fraction fitted to measured runs (the stored fit at ``path``)."""
        fit = load_fit(path)
        where = fit.provenance.get("measured_at", "?")
        source = (
            f"fitted: Amdahl serial fraction {fit.serial_fraction:.3f} from {len(fit.points)} runs of the "
            f"example job ({path.name}, measured {where}, rms residual {fit.rms_residual:.1%})"
        )
        return cls(**{"serial_fraction": fit.serial_fraction, "fit_source": source, **overrides})

    def need(self, gpus: int) -> int:
        """Millicores at which a job's GPUs run at full speed (0: a CPU-only job, not tunable)."""
        return gpus * self.cpu_per_gpu_millis

    def _scaling(self, cpu_millis: float) -> float:
        s = min(1.0, max(0.0, self.serial_fraction))
        return 1.0 / (s + (1.0 - s) / (cpu_millis / 1000.0))

    def speed(self, gpus: int, cpu_millis: int) -> float:
        """Fraction of full speed with ``cpu_millis`` (1.0 for CPU-only jobs: their run time is theirs)."""
        need = self.need(gpus)
        if need <= 0:
            return 1.0
        if cpu_millis <= 0:
            return 0.0
        if self.serial_fraction <= 0:
            return min(1.0, cpu_millis / need)
        return min(1.0, self._scaling(cpu_millis) / self._scaling(need))

    def cpu_range(self, gpus: int, cpu_millis: int, max_node_cpu_millis: int) -> tuple[int, int] | None:
        """The range a trace job is taken to declare, or None (CPU-only jobs)."""
        if gpus <= 0:
            return None
        top = int(cpu_millis * self.range_factor) // CPU_GRAIN * CPU_GRAIN
        return cpu_millis, max(cpu_millis, min(top, max_node_cpu_millis))

    def describe(self) -> list[str]:
        """The model in words, for the command's output."""
        return [
            "speed model (a model, not a measurement; docs/tuning.md):",
            f"  a GPU job's GPUs can use {self.cpu_per_gpu_millis}m CPU each; with c millicores it runs at "
            "min(1, S(c) / S(need)) of full speed, S(c) = 1 / (s + (1 - s) / c) (Amdahl, c in CPUs); "
            "the trace run time is the time at the requested CPU",
            f"  s = {self.serial_fraction:.3f}: {self.fit_source}",
            f"  declared range cpu: [requested, {self.range_factor:g} x requested] (cut to the biggest node); "
            "CPU-only jobs are not tuned",
            f"  the tuner (jobs/tuning detector + policy) looks after a {self.window_seconds:.0f} s window, at "
            f"most {self.max_changes} changes per job, within the tenant's free quota and the node's free CPU",
            f"  a change costs {self.restart_seconds:.0f} s (checkpoint-restart), in place on the job's node",
        ]


@dataclass(slots=True)
class TunedJob:
    """A running tunable job's state in the replay: its allocation, the work left and the tuner's past."""

    gpus: int
    memory_mib: int
    cpu_range: tuple[int, int]
    cpu_millis: int
    work_left: float
    since: float
    history: History = field(default_factory=History)
    holds: int = 0
    version: int = 0

    def speed(self, model: SpeedModel) -> float:
        return model.speed(self.gpus, self.cpu_millis)

    def end(self, model: SpeedModel) -> float:
        """When the job completes at its current speed, from ``since`` (after any restart)."""
        return self.since + self.work_left / self.speed(model)

    def advance(self, model: SpeedModel, now: float) -> None:
        """Account the progress made up to ``now`` at the current speed."""
        if now > self.since:
            self.work_left = max(0.0, self.work_left - (now - self.since) * self.speed(model))
            self.since = now


@dataclass(slots=True)
class TuningStats:
    """What the tuner did in one replay, and the bounds it stayed within (checked at every change)."""

    tunable_jobs: int = 0
    looks: int = 0
    scales: int = 0
    keeps: int = 0
    reverts: int = 0
    holds: int = 0
    jobs_scaled: int = 0
    mean_start_speed: float = 0.0
    mean_final_speed: float = 0.0
    peak_tenant_cpu_over_quota: float = 0.0
    min_node_free_cpu_millis: int = 0
    max_cpu_over_range_top: float = 0.0


def model_points(model: SpeedModel, job: TunedJob, now: float) -> list[Point]:
    """The telemetry window the model implies for the job's current allocation (oldest first)."""
    speed = job.speed(model)
    need = model.need(job.gpus)
    looks = int(model.window_seconds // model.telemetry_seconds) + 1
    return [
        Point(
            ts=now - model.window_seconds + k * model.telemetry_seconds,
            cpu_used=float(min(job.cpu_millis, need)),
            cpu_limit=float(job.cpu_millis),
            memory_used=job.memory_mib / 2,
            memory_limit=float(job.memory_mib or 1),
            speed=speed * FULL_SPEED,
            gpu_util=speed,
        )
        for k in range(looks)
    ]


def tuner_look(
    model: SpeedModel, job: TunedJob, *, now: float, free_cpu_millis: int
) -> tuple[Diagnosis, Decision]:
    """Diagnose the job from the model's telemetry and let the platform's policy decide."""
    diagnosis = diagnose(model_points(model, job, now), thresholds=Thresholds())
    limits = Limits(
        cpu_range=job.cpu_range,
        learners_range=None,
        free_cpu_millis=max(0, free_cpu_millis),
        max_changes=model.max_changes,
        window_seconds=model.window_seconds,
        regression_tolerance=model.regression_tolerance,
    )
    current = Allocation(job.cpu_millis, 1)
    return diagnosis, decide(
        diagnosis=diagnosis, current=current, history=job.history, limits=limits, now=now
    )


def record(job: TunedJob, diagnosis: Diagnosis, decision: Decision, *, now: float) -> None:
    """Fold a decision into the job's history as the service rebuilds it from its tuning events."""
    h = job.history
    if decision.action == "scale":
        pending = Pending(Allocation(job.cpu_millis, 1), decision.direction, diagnosis.speed or 0.0, now)
        job.history = replace(h, changes=h.changes + 1, last_change_at=now, pending=pending)
    elif decision.action == "revert":
        reverted = h.reverted | {decision.direction}
        job.history = replace(h, changes=h.changes + 1, last_change_at=now, pending=None, reverted=reverted)
    elif decision.action == "keep":
        job.history = replace(h, pending=None, kept=h.kept | {decision.direction})
    job.holds = job.holds + 1 if decision.action == "hold" else 0


def next_look(model: SpeedModel, job: TunedJob, decision: Decision, *, now: float) -> float | None:
    """When the tuner looks at the job again (None: never; it can do nothing more for it)."""
    if decision.action in ("scale", "revert"):
        return now + model.restart_seconds + model.window_seconds
    if decision.action == "keep":
        return now + model.interval_seconds
    if decision.code in ("max_changes", "reverted") or job.holds >= model.max_holds:
        return None
    return now + model.window_seconds
