"""Communication-bound distributed jobs: the pure verdict over speeds at several learner counts (synthetic
series: no cluster here exposes network bytes per step), the policy's learner shrink within the declared
range, and the tuner's own path on a job's telemetry: grown by a learner when CPU-bound, the extra learner
kept because it was not slower, then shrunk back once its window shows it did not help, and not grown again.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs.core.states import JobStatus
from jobs.core.tuning.detector import Point, diagnose
from jobs.core.tuning.policy import Allocation, History, Limits, decide
from jobs.core.tuning.scaling import reclassify, scaling_verdict
from jobs.models import Job, TelemetrySample
from jobs.services.tuning import job_autotune
from tests.factories import SPEC, make_job, make_tenant


@pytest.mark.parametrize(
    ("speeds", "current", "bound", "target"),
    [
        ({1: 100, 2: 190, 4: 200}, 4, True, 2),  # 4 learners barely faster than 2
        ({1: 100, 2: 105}, 2, True, 1),  # the second learner bought 5 %
        ({2: 210, 4: 180}, 4, True, 2),  # slower with more
        ({1: 100, 2: 190}, 2, False, None),  # scales
        ({1: 100, 2: 190, 4: 360}, 4, False, None),
        ({2: 190, 4: 200}, 2, True, 2),  # at the right count: hold, do not grow again
        ({4: 200}, 4, False, None),  # one count measured: nothing to compare
    ],
)
def test_the_verdict_finds_the_fewest_learners_that_were_as_fast(
    speeds: dict[int, float], current: int, bound: bool, target: int | None
) -> None:
    verdict = scaling_verdict(speeds, current=current, min_gain=0.2)
    assert (verdict.communication_bound, verdict.target) == (bound, target)


def points(
    learners: int, total_speed: float, *, cpu: float = 600, memory: float = 300, n: int = 8
) -> list[Point]:
    rng = random.Random(learners)
    return [
        Point(
            ts=10.0 * i, cpu_used=cpu, cpu_limit=1000, memory_used=memory, memory_limit=1024,
            speed=total_speed * (1 + rng.uniform(-0.02, 0.02)), learners=learners,
        )
        for i in range(n)
    ]  # fmt: skip


def limits(low: int = 1, high: int = 4) -> Limits:
    return Limits(cpu_range=(1000, 1000), learners_range=(low, high), free_cpu_millis=100_000)


def test_a_communication_bound_job_is_shrunk_within_its_range() -> None:
    diagnosis = reclassify(diagnose(points(4, 200)), scaling_verdict({1: 100, 2: 190, 4: 200}, current=4))
    assert diagnosis.bottleneck == "communication_bound" and diagnosis.evidence["learners_target"] == 2
    assert diagnosis.evidence["speed_at_2_learners"] == 190
    decision = decide(
        diagnosis=diagnosis, current=Allocation(1000, 4), history=History(), limits=limits(), now=0
    )
    assert decision.action == "scale" and decision.target == Allocation(1000, 2)
    assert decision.direction == "learners_down" and "communication_bound" in decision.reason
    floor = decide(
        diagnosis=diagnosis, current=Allocation(1000, 4), history=History(), limits=limits(3), now=0
    )
    assert floor.target == Allocation(1000, 3)  # never below the declared range


def test_a_cpu_bound_job_is_not_grown_past_the_count_that_stopped_helping() -> None:
    busy = diagnose(points(2, 190, cpu=990))
    assert busy.bottleneck == "cpu_bound"
    alone = decide(diagnosis=busy, current=Allocation(1000, 2), history=History(), limits=limits(), now=0)
    assert alone.action == "scale" and alone.direction == "learners_up"  # nothing measured: try one more
    held = reclassify(busy, scaling_verdict({2: 190, 3: 195}, current=2))
    decision = decide(diagnosis=held, current=Allocation(1000, 2), history=History(), limits=limits(), now=0)
    assert decision.action == "hold" and "more learners did not help" in decision.reason


def test_memory_pressure_and_unstable_windows_are_left_as_they_are() -> None:
    verdict = scaling_verdict({2: 190, 4: 200}, current=4)
    assert reclassify(diagnose(points(4, 200, memory=1000)), verdict).bottleneck == "memory_pressure"
    noisy = [
        Point(p.ts, p.cpu_used, 1000, 300, 1024, (p.speed or 0) * (1 + i % 2), 4)
        for i, p in enumerate(points(4, 200))
    ]
    assert reclassify(diagnose(noisy), verdict).bottleneck == "unknown"


# --- the tuner's path -----------------------------------------------------------------------------------


@pytest.fixture
def _fast_windows(settings: Any) -> None:
    settings.TUNING_WINDOW_SECONDS = 60
    settings.TUNING_MIN_SAMPLES = 5
    settings.TUNING_WARMUP_LOOKS = 0  # every recorded look counts (the warm-up has its own tests)
    settings.TUNING_STABLE_CV = 0.15
    settings.TUNING_MAX_CHANGES = 3
    settings.TUNING_REGRESSION_TOLERANCE = 0.05
    settings.TUNING_SCALING_MIN_GAIN = 0.2


def record(job: Job, *, now: datetime, total_speed: float, cpu: int) -> None:
    """Six looks over the last 30 s at the job's learner count, each learner printing its share."""
    rng = random.Random(job.learners)
    TelemetrySample.objects.bulk_create(
        TelemetrySample(
            job=job, attempt=job.attempt, learner=learner, ts=now - timedelta(seconds=5 * (6 - i)),
            cpu_millis_used=cpu, cpu_millis_limit=job.cpu_millis, memory_mib_used=300, memory_mib_limit=1024,
            samples_per_sec=total_speed / job.learners * (1 + rng.uniform(-0.02, 0.02)),
        )
        for i in range(6)
        for learner in range(job.learners)
    )  # fmt: skip


def next_attempt(job: Job) -> Job:
    """The requeued job admitted again, as the scheduler would, with the tuner's new size."""
    assert Job.objects.get(pk=job.pk).status == JobStatus.REQUEUED
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=job.attempt + 1)
    return Job.objects.get(pk=job.pk)


@pytest.mark.django_db
@pytest.mark.usefixtures("_fast_windows")
def test_the_tuner_shrinks_a_job_whose_extra_learner_did_not_help_and_does_not_grow_it_again() -> None:
    job = make_job(make_tenant(), status=JobStatus.RUNNING, attempt=1, cpu_millis=1000, learners=2)
    tuning = {"threads": "auto", "cpu_millis": [1000, 1000], "learners": [1, 4]}
    Job.objects.filter(pk=job.pk).update(spec=dict(SPEC, tuning=tuning))
    job.refresh_from_db()
    now = timezone.now()
    record(job, now=now, total_speed=190, cpu=990)
    grown = job_autotune(job_id=job.pk, now=now)
    assert grown is not None and grown.direction == "learners_up" and grown.target == Allocation(1000, 3)
    job = next_attempt(job)
    now += timedelta(seconds=100)
    record(job, now=now, total_speed=196, cpu=990)  # 3 % faster with 50 % more learners
    kept = job_autotune(job_id=job.pk, now=now)
    assert kept is not None and kept.action == "keep"  # not slower, so the regression rule keeps it
    now += timedelta(seconds=100)
    TelemetrySample.objects.filter(job=job).delete()
    record(job, now=now, total_speed=196, cpu=990)
    shrunk = job_autotune(job_id=job.pk, now=now)
    assert shrunk is not None and shrunk.action == "scale" and shrunk.target == Allocation(1000, 2)
    assert shrunk.evidence["diagnosis"] == "communication_bound"
    assert shrunk.evidence["speed_at_2_learners"] == pytest.approx(190, rel=0.05)
    job.refresh_from_db()
    assert (job.status, job.reason, job.learners) == (JobStatus.REQUEUED, "Tuned", 2)
    job = next_attempt(job)
    now += timedelta(seconds=100)
    record(job, now=now, total_speed=190, cpu=990)
    assert job_autotune(job_id=job.pk, now=now).action == "keep"
    now += timedelta(seconds=100)
    TelemetrySample.objects.filter(job=job).delete()
    record(job, now=now, total_speed=190, cpu=990)  # CPU-bound again at the top of its CPU range
    held = job_autotune(job_id=job.pk, now=now)
    assert held is not None and held.action == "hold" and "more learners did not help" in held.reason
    assert Job.objects.get(pk=job.pk).learners == 2
