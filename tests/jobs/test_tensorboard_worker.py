"""A TensorBoard piece is parsed by a real Celery worker (threads, the real Redis broker), never by the web
request that stored it: the upload answers at once with `queued`, the worker's `jobs.tensorboard.parse`
stores every point once over as many runs as it takes (the row caps: tests/jobs/test_write_caps.py), and the
beat sweep queues a file whose task was lost."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.test import Client
from django.utils import timezone

from jobs.artifacts.storage import artifact_storage
from jobs.artifacts.tokens import HEADER, mint_token
from jobs.core.states import JobStatus
from jobs.models import EventFile, Job, JobEvent, MetricSample
from jobs.services import job_submit
from jobs.tensorboard.tasks import sweep
from tests.conftest import _end_other_database_sessions
from tests.factories import make_tenant, member
from tests.jobs.engine import wait_until
from tests.jobs.tensorboard_files import write_scalars

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SPEC = "name: tb\nimage: python:3.11\ncommand: [python, train.py]\nevaluation_metrics: {type: tensorboard, in: runs}\n"
FILE = "events.out.tfevents.1.host.1"


@pytest.fixture
def worker(settings: Any, tmp_path: Path) -> Iterator[None]:
    """A Celery worker in this process for one test, stopped with its pool threads afterwards."""
    from celery.contrib.testing.worker import start_worker

    from portal.celery import app

    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "artifacts")},
    }
    app.control.purge()
    before = set(threading.enumerate())
    queues = [settings.TENSORBOARD_QUEUE]  # only the TensorBoard queue: the parse tasks are routed there
    with start_worker(
        app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=10, queues=queues
    ) as w:
        yield
    w.pool.executor.shutdown(wait=True, cancel_futures=True)
    pool = [t for t in set(threading.enumerate()) - before if t.name.startswith("ThreadPoolExecutor")]
    assert not [t.name for t in pool if t.is_alive()], "worker threads still running after the test"
    _end_other_database_sessions()


def running_job() -> Job:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    job.refresh_from_db()
    return job


def send(job: Job, data: bytes, offset: int = 0) -> Any:
    headers = {
        HEADER: mint_token(job_id=job.pk, attempt=1),
        "X-Trainyard-Offset": str(offset),
        "X-Trainyard-Sha256": hashlib.sha256(data).hexdigest(),
    }
    return Client(headers=headers).put(
        f"/api/v1/artifacts/{job.pk}/1/0/tensorboard/files/{FILE}",
        data,
        content_type="application/octet-stream",
    )


def test_the_worker_reads_stored_pieces_into_every_point_once(
    worker: None, settings: Any, tmp_path: Path
) -> None:
    settings.TENSORBOARD_UPLOAD_MAX_BYTES = 4096  # a run reads at most one piece's worth: several runs here
    job = running_job()
    data = write_scalars(tmp_path / "w", "loss", [1.0 / (i + 1) for i in range(120)])
    for start in range(0, len(data), 4096):
        answer = send(job, data[start : start + 4096], start)
        assert answer.status_code == 201 and answer.json()["queued"] is True
    wait_until(
        lambda: EventFile.objects.get(job=job).parsed == len(data),
        timeout=60,
        what="the worker read the file",
    )
    steps = list(MetricSample.objects.filter(job=job).order_by("step").values_list("step", flat=True))
    assert steps == list(range(120)), "every point once, over several runs of at most a piece each"
    assert not JobEvent.objects.filter(job=job, kind="caps").exists()


def test_the_sweep_queues_a_file_whose_parse_task_was_lost(worker: None, tmp_path: Path) -> None:
    job = running_job()
    data = write_scalars(tmp_path / "w", "loss", [3.0, 2.0, 1.0])
    # The piece is stored as the web stores it, but its task never reached the broker.
    name = artifact_storage().save(f"tensorboard/lost/{job.pk}/0", ContentFile(data))
    EventFile.objects.create(
        job=job, attempt=1, learner=0, path=FILE, size=len(data), chunks=[[0, len(data), name]]
    )
    EventFile.objects.filter(job=job).update(updated_at=timezone.now() - timedelta(days=2))
    assert sweep.apply().get() == {"queued": 0}, "only files of the last day are swept"
    EventFile.objects.filter(job=job).update(updated_at=timezone.now() - timedelta(minutes=5))
    assert sweep.apply().get() == {"queued": 1}
    wait_until(
        lambda: MetricSample.objects.filter(job=job).count() == 3, timeout=60, what="the swept file's points"
    )
