"""The tuner end to end on kubesim: the example PyTorch job, CPU-starved at 1 CPU of its [1, 2] range, is
sampled (metrics.k8s.io), found stable and CPU-bound, requeued with reason Tuned at 2 CPUs without using
up a retry, and resumes from its checkpoint: its log and metrics go on across the restart."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from examples.train.localspec import example_spec
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent, LogLine, MetricSample, TelemetrySample
from jobs.services import job_cancel, job_submit
from jobs.services.tuning import autotune_running
from jobs.telemetry import telemetry_record_running
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tuner(engine: KubeSim, settings: Any) -> Iterator[None]:
    """Beat's telemetry and autotune tasks, every second, with short windows."""
    settings.TELEMETRY_INTERVAL_SECONDS = 1
    settings.TUNING_WINDOW_SECONDS = 6
    settings.TUNING_MIN_SAMPLES = 4
    settings.TUNING_STABLE_CV = 0.35
    settings.TUNING_CPU_HIGH = 0.6  # a shared 2-core test machine may not give the job its whole CPU
    settings.TUNING_MAX_CHANGES = 1
    stop = threading.Event()

    def beat() -> None:
        from django.db import connection

        while not stop.wait(1.0):
            try:
                telemetry_record_running()
                autotune_running()
            except Exception:  # noqa: S112 - keep sampling; the assertions tell what went wrong
                continue
        connection.close()

    thread = threading.Thread(target=beat, name="tuner-beat", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


def test_cpu_starved_job_is_tuned_up_and_resumes_from_its_checkpoint(tuner: None) -> None:
    tenant = make_tenant()
    user = member(tenant)
    spec = example_spec(
        name="starved",
        args=["--steps=100000", "--log-every=5", "--checkpoint-every=10", "--batch-size=64"],
        env={"TRAIN_INPUT_COST": "6"},
    )
    job = job_submit(tenant=tenant, user=user, document=spec)
    try:
        wait_status(job, JobStatus.RUNNING, timeout=60, logs=True)
        # Training has begun (torch imported, first steps reported) before the tuner's clock matters: on a
        # busy machine the start alone can take a minute.
        wait_until(
            lambda: MetricSample.objects.filter(job=job, attempt=1).exists(),
            timeout=180,
            what=f"attempt 1 to report metrics: {describe(job, logs=True)}",
        )
        scaled = wait_until(
            lambda: JobEvent.objects.filter(job=job, kind="tuning", reason="Scaled").first(),
            timeout=120,
            what=f"the tuner to act: {describe(job, logs=True)}",
        )
        assert scaled.data["evidence"]["diagnosis"] == "cpu_bound"
        assert scaled.data["evidence"]["stable"] is True
        assert scaled.data["to"] == {"cpu_millis": 2000, "learners": 1}
        requeued = JobEvent.objects.get(job=job, kind="transition", to_status=JobStatus.REQUEUED)
        assert requeued.reason == "Tuned" and requeued.data == {"counts": False}

        def second_attempt_training() -> bool:
            job.refresh_from_db()
            return job.attempt == 2 and MetricSample.objects.filter(job=job, attempt=2).count() >= 2

        wait_until(
            second_attempt_training, timeout=90, what=f"attempt 2 to train: {describe(job, logs=True)}"
        )
        job.refresh_from_db()
        assert (job.cpu_millis, job.status, job.max_retries) == (2000, JobStatus.RUNNING, 2)
        resumed = LogLine.objects.filter(job=job, attempt=2, text__startswith="resumed from step").first()
        assert resumed is not None, describe(job, logs=True)
        resumed_step = int(resumed.text.rsplit(" ", 1)[1])
        assert resumed_step >= 10
        first_steps = MetricSample.objects.filter(job=job, attempt=2, name="loss").order_by("log_seq")
        assert first_steps[0].step is not None and first_steps[0].step > resumed_step
        attempt1 = MetricSample.objects.filter(job=job, attempt=1, name="loss").order_by("log_seq")
        assert attempt1.last().step >= resumed_step  # nothing lost: attempt 2 starts where 1 checkpointed
        seqs = list(LogLine.objects.filter(job=job, learner=0).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1))  # one numbering across both attempts, no gap, no repeat
        threads = LogLine.objects.filter(job=job, attempt=2, text__startswith="training on").first()
        assert threads is not None and "'intra_op': 2" in threads.text
        wait_until(
            lambda: TelemetrySample.objects.filter(job=job, attempt=2, cpu_millis_limit=2000).exists(),
            timeout=30,
            what="telemetry of attempt 2",
        )
    finally:
        job.refresh_from_db()
        if not job.is_terminal:
            job_cancel(job=job, user=user)
            wait_status(Job.objects.get(pk=job.pk), JobStatus.CANCELLED, timeout=60)
