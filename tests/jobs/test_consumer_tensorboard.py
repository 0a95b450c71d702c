"""Points read from TensorBoard event files reach a job's live viewers (jobs/consumers.py) over the real
stack: the worker's parse publishes them after commit, and the socket forwards them as one `metrics` frame with
log_seq 0, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.core.files.base import ContentFile

from jobs.artifacts.storage import artifact_storage
from jobs.models import EventFile, Job, Learner
from jobs.services import job_submit
from jobs.services.tensorboard import event_file_append
from jobs.tensorboard.tasks import parse
from tenants.policy import write_caps
from tests.factories import make_tenant, member
from tests.jobs.tensorboard_files import write_scalars
from tests.jobs.test_consumers import connect, frames_until, run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def artifact_folder(settings: Any, tmp_path: Path) -> None:
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "artifacts")},
    }


def send_file(job: Job, data: bytes) -> None:
    """Store a whole file as one piece, then parse it as the worker's task does."""
    stored = artifact_storage().save(f"tensorboard/test/{job.pk}/0", ContentFile(data))
    row = event_file_append(
        job=job, attempt=1, learner=0, path="events.out.tfevents.1", offset=0, size=len(data),
        stored_name=stored, max_files=10, caps=write_caps(job.tenant),
    )  # fmt: skip
    assert isinstance(row, EventFile)
    parse.apply(args=(row.pk,)).get()


def test_event_file_points_arrive_live_as_a_metrics_frame_once(tmp_path: Path) -> None:
    tenant = make_tenant()
    user: User = member(tenant)
    job = job_submit(tenant=tenant, user=user, document={"name": "a", "image": "b", "command": ["c"]})
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="p")
    data = write_scalars(tmp_path / "w", "loss", [1.0, 0.5])

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(comm, lambda fs: any(f["type"] == "subscribed" for f in fs))
        await database_sync_to_async(send_file)(job, data)
        (frame,) = await frames_until(comm, lambda fs: len(fs) == 1)
        assert frame == {
            "type": "metrics",
            "job": job.pk,
            "learner": 0,
            "points": [["loss", 0, 1.0, 0], ["loss", 1, 0.5, 0]],
        }
        assert await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()

    run(scenario)
