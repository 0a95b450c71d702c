"""The tuner applied: a CPU-bound job is requeued with reason Tuned and the new allocation (within range
and the tenant's free quota), using up no retry; it never acts before stable; a regression is reverted;
holds are recorded once; the next attempt is admitted with the new size."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent, Learner, TelemetrySample
from jobs.services import lifecycle
from jobs.services.tuning import job_autotune
from jobs.tuning.selectors import tuning_history
from tests.factories import SPEC, make_job, make_tenant

pytestmark = pytest.mark.django_db
TUNING = {"threads": "auto", "cpu_millis": [1000, 2000], "learners": None}


@pytest.fixture(autouse=True)
def _fast_windows(settings: Any) -> None:
    settings.TUNING_WINDOW_SECONDS = 60
    settings.TUNING_MIN_SAMPLES = 5
    settings.TUNING_WARMUP_LOOKS = 0
    settings.TUNING_STABLE_CV = 0.15
    settings.TUNING_MAX_CHANGES = 3
    settings.TUNING_REGRESSION_TOLERANCE = 0.05


def tunable_job(*, cpu_millis: int = 1000, attempt: int = 1, max_retries: int = 2) -> Job:
    tenant = make_tenant()
    job = make_job(
        tenant=tenant,
        status=JobStatus.RUNNING,
        attempt=attempt,
        cpu_millis=cpu_millis,
        max_retries=max_retries,
    )
    Job.objects.filter(pk=job.pk).update(spec=dict(SPEC, tuning=TUNING))
    job.refresh_from_db()
    return job


def record(job: Job, *, cpu: int, speed: float, n: int = 6, jitter: float = 0.02, seed: int = 0) -> None:
    rng = random.Random(seed)
    now = timezone.now()
    TelemetrySample.objects.bulk_create(
        TelemetrySample(
            job=job, attempt=job.attempt, learner=0, ts=now - timedelta(seconds=5 * (n - i)),
            cpu_millis_used=cpu, cpu_millis_limit=job.cpu_millis, memory_mib_used=300, memory_mib_limit=1024,
            samples_per_sec=speed * (1 + rng.uniform(-jitter, jitter)),
        )
        for i in range(n)
    )  # fmt: skip


def tuning_events(job: Job) -> list[str]:
    return list(job.events.filter(kind="tuning").values_list("reason", flat=True))


def test_cpu_bound_job_is_requeued_tuned_with_more_cpu() -> None:
    job = tunable_job()
    record(job, cpu=995, speed=1000)
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.action == "scale"
    job.refresh_from_db()
    assert (job.status, job.reason, job.cpu_millis) == (JobStatus.REQUEUED, "Tuned", 2000)
    scaled = job.events.get(kind="tuning")
    assert scaled.reason == "Scaled"
    assert scaled.data["from"] == {"cpu_millis": 1000, "learners": 1}
    assert scaled.data["to"] == {"cpu_millis": 2000, "learners": 1}
    assert scaled.data["evidence"]["diagnosis"] == "cpu_bound"
    assert scaled.data["evidence"]["cpu_util"] == pytest.approx(0.995)
    assert scaled.data["speed_before"] == pytest.approx(1000, rel=0.05)
    requeue = job.events.get(kind="transition", to_status=JobStatus.REQUEUED)
    assert requeue.reason == "Tuned" and requeue.data == {"counts": False}


def test_never_exceeds_the_tenants_free_quota() -> None:
    job = tunable_job()
    quota = job.tenant.quota
    quota.cpu_millis = 1500  # the job holds 1000m of it: 500m free
    quota.save()
    record(job, cpu=995, speed=1000)
    job_autotune(job_id=job.pk)
    job.refresh_from_db()
    assert job.cpu_millis == 1500
    assert job.total_cpu_millis <= quota.cpu_millis


def test_no_free_quota_means_no_change() -> None:
    job = tunable_job()
    quota = job.tenant.quota
    quota.cpu_millis = 1000
    quota.save()
    record(job, cpu=995, speed=1000)
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.action == "hold"
    job.refresh_from_db()
    assert (job.status, job.cpu_millis) == (JobStatus.RUNNING, 1000)


def test_never_acts_before_stable_and_records_the_hold_once() -> None:
    job = tunable_job()
    record(job, cpu=995, speed=1000, jitter=0.8)
    for _ in range(3):
        decision = job_autotune(job_id=job.pk)
        assert decision is not None and (decision.action, decision.code) == ("hold", "unstable")
    job.refresh_from_db()
    assert (job.status, job.cpu_millis) == (JobStatus.RUNNING, 1000)
    assert tuning_events(job) == ["Holding"]


def test_too_few_samples_is_not_stable() -> None:
    job = tunable_job()
    record(job, cpu=995, speed=1000, n=3)
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.code == "unstable"


def test_a_job_without_a_range_is_left_alone() -> None:
    job = make_job(status=JobStatus.RUNNING, attempt=1)
    record(job, cpu=995, speed=1000)
    assert job_autotune(job_id=job.pk) is None
    assert tuning_events(job) == []


def test_a_regression_is_reverted_and_not_retried() -> None:
    job = tunable_job()
    record(job, cpu=995, speed=1000)
    job_autotune(job_id=job.pk)
    job.refresh_from_db()
    lifecycle.job_admit(job_id=job.pk, placements=["node-1"])
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    assert (job.attempt, job.cpu_millis) == (2, 2000)
    record(job, cpu=1990, speed=700)  # twice the CPU, 30% slower
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.action == "revert"
    job.refresh_from_db()
    assert (job.status, job.cpu_millis) == (JobStatus.REQUEUED, 1000)
    reverted = job.events.filter(kind="tuning").last()
    assert reverted is not None and reverted.reason == "Reverted"
    assert reverted.data["evidence"]["speed_ratio"] == pytest.approx(0.7, rel=0.05)
    history = tuning_history(job)
    assert history.changes == 2 and history.pending is None and history.reverted == {"cpu_up"}


def test_an_improvement_is_kept() -> None:
    job = tunable_job()
    record(job, cpu=995, speed=1000)
    job_autotune(job_id=job.pk)
    lifecycle.job_admit(job_id=job.pk, placements=["node-1"])
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    record(job, cpu=1990, speed=1800)
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.action == "keep"
    job.refresh_from_db()
    assert (job.status, job.cpu_millis) == (JobStatus.RUNNING, 2000)
    assert tuning_events(job) == ["Scaled", "Kept"]


def test_tuning_restarts_use_up_no_retry_and_count_attempts() -> None:
    job = tunable_job(max_retries=1)
    record(job, cpu=995, speed=1000)
    job_autotune(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED
    lifecycle.job_admit(job_id=job.pk, placements=["node-1"])
    job.refresh_from_db()
    assert job.attempt == 2
    assert Learner.objects.filter(job=job, attempt=2).count() == 1
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    lifecycle.job_requeue_or_fail(job, reason="NodeLost", message="node gone")  # the one retry
    job.refresh_from_db()
    assert job.status == JobStatus.REQUEUED
    failures = JobEvent.objects.filter(job=job, to_status=JobStatus.REQUEUED, data__counts=True).count()
    assert failures == 1


def test_one_change_per_window_then_at_most_max_changes(settings: Any) -> None:
    settings.TUNING_MAX_CHANGES = 1
    job = tunable_job(cpu_millis=1000)
    record(job, cpu=995, speed=1000)
    job_autotune(job_id=job.pk)
    lifecycle.job_admit(job_id=job.pk, placements=["node-1"])
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    record(job, cpu=1990, speed=1900)
    kept = job_autotune(job_id=job.pk)
    assert kept is not None and kept.action == "keep"
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.code in ("max_changes", "window")


def record_series(job: Job, *, cpu: int, speeds: list[float]) -> None:
    """One look per speed, 5 s apart, oldest first, ending now."""
    now = timezone.now()
    TelemetrySample.objects.bulk_create(
        TelemetrySample(
            job=job, attempt=job.attempt, learner=0, ts=now - timedelta(seconds=5 * (len(speeds) - i)),
            cpu_millis_used=cpu, cpu_millis_limit=job.cpu_millis, memory_mib_used=300, memory_mib_limit=1024,
            samples_per_sec=speed,
        )
        for i, speed in enumerate(speeds)
    )  # fmt: skip


def scaled_and_restarted(job: Job) -> Job:
    record(job, cpu=995, speed=1000)
    job_autotune(job_id=job.pk)
    lifecycle.job_admit(job_id=job.pk, placements=["node-1"])
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    return job


def test_the_new_attempts_warm_up_looks_are_not_judged(settings: Any) -> None:
    settings.TUNING_STABLE_CV = 0.3
    job = scaled_and_restarted(tunable_job())
    settings.TUNING_WARMUP_LOOKS = 2
    # The first two looks carry the restart's start-up (half speed); the next five run at 1.9x.
    record_series(job, cpu=1990, speeds=[600, 900, 1900, 1880, 1920, 1900, 1910])
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.action == "keep"
    assert decision.evidence["speed_ratio"] == pytest.approx(1.9, rel=0.02)
    assert decision.evidence["points"] == 5


def test_judging_waits_for_enough_looks_after_the_warm_up(settings: Any) -> None:
    job = scaled_and_restarted(tunable_job())
    settings.TUNING_WARMUP_LOOKS = 2
    record_series(job, cpu=1990, speeds=[600, 900, 1900, 1900, 1900, 1900])
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and (decision.action, decision.code) == ("hold", "pending")


def test_a_neighbours_burst_in_the_window_does_not_revert_a_real_speed_up(settings: Any) -> None:
    settings.TUNING_STABLE_CV = 0.3
    job = scaled_and_restarted(tunable_job())
    # One look caught a neighbour's burst: the mean falls to 1.68x, the median stays at 1.9x.
    record_series(job, cpu=1990, speeds=[1900, 1910, 800, 1890, 1900, 1920])
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and decision.action == "keep"
    assert decision.evidence["speed_ratio"] == pytest.approx(1.9, rel=0.02)


def test_after_a_kept_cpu_up_the_job_is_not_scaled_back_down(settings: Any) -> None:
    settings.TUNING_WINDOW_SECONDS = 30
    job = scaled_and_restarted(tunable_job())
    record(job, cpu=1990, speed=1900)
    kept = job_autotune(job_id=job.pk)
    assert kept is not None and kept.action == "keep"
    assert tuning_history(job).kept == {"cpu_up"}
    TelemetrySample.objects.filter(job=job).delete()
    JobEvent.objects.filter(job=job, kind="tuning").update(created_at=timezone.now() - timedelta(minutes=5))
    record(job, cpu=400, speed=1900)  # the node got busy: 20% of the 2000m limit used
    decision = job_autotune(job_id=job.pk)
    assert decision is not None and (decision.action, decision.code) == ("hold", "kept")
    job.refresh_from_db()
    assert (job.status, job.cpu_millis) == (JobStatus.RUNNING, 2000)
