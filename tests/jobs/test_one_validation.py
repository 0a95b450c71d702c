"""One validation: whatever the pod builder would refuse is refused at submit, with a field error and
nothing stored; a stored spec the builder refuses after all fails its job at once, never loops."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobs.models import Job, JobEvent
from jobs.services import JobRejected, job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, wait_status

pytestmark = pytest.mark.django_db


def refused(**fields: Any) -> dict[str, list[str]]:
    tenant = make_tenant()
    document = {"name": "x", "image": "python:3.11", "command": ["python"], **fields}
    with pytest.raises(JobRejected) as caught:
        job_submit(tenant=tenant, user=member(tenant), document=json.dumps(document))
    assert not Job.objects.exists(), "nothing half stored"
    return caught.value.errors


def accepted(**fields: Any) -> Job:
    tenant = make_tenant()
    document = {"name": "x", "image": "python:3.11", "command": ["python"], **fields}
    return job_submit(tenant=tenant, user=member(tenant), document=json.dumps(document))


def volume(mount_path: str) -> dict[str, Any]:
    return {"name": "mine", "kind": "data", "type": "pvc", "claim": "data", "mount_path": mount_path}


@pytest.mark.parametrize(
    ("mount_path", "owner"),
    [
        ("/scratch", "scratch space"),
        ("/scratch/", "scratch space"),
        ("/job/checkpoints", "checkpoint_dir"),
    ],
)
def test_a_volume_on_one_of_the_platforms_mount_points_is_a_field_error(mount_path: str, owner: str) -> None:
    errors = refused(volumes=[volume(mount_path)], checkpoint_dir="/job/checkpoints")
    [message] = errors["volumes[0].mount_path"]
    assert owner in message and "mount the volume elsewhere" in message


def test_a_volume_on_the_code_folder_is_refused_when_code_is_unpacked_there(settings: Any) -> None:
    settings.ARTIFACTS_BASE_URL = "http://trainyard.example"
    errors = refused(volumes=[volume("/trainyard/model")])
    assert "the job's code (MODEL_DIR)" in errors["volumes[0].mount_path"][0]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("OMP_NUM_THREADS", "set tuning.threads: off"),
        ("MODEL_DIR", "code is unpacked"),
        ("TRAINING_ID", "learner contract"),
        ("RANK", "rendezvous"),
        ("PET_NNODES", "rendezvous"),
        ("TRAINYARD_ANYTHING", "belong to the platform"),
        ("TORCHELASTIC_RUN_ID", "belong to the platform"),
        ("NVIDIA_VISIBLE_DEVICES", "GPU runtime"),
    ],
)
def test_env_names_the_platform_sets_are_refused_saying_what_it_sets(name: str, says: str) -> None:
    errors = refused(env={name: "mine", "FINE": "yes"})
    assert list(errors) == [f"env.{name}"]
    assert says in errors[f"env.{name}"][0] and name in errors[f"env.{name}"][0]


def test_thread_variables_are_the_users_once_threads_are_not_managed() -> None:
    job = accepted(env={"OMP_NUM_THREADS": "3"}, tuning={"threads": "off"})
    assert job.spec["env"] == {"OMP_NUM_THREADS": "3"}


def test_cpu_as_a_decimal_is_read_as_written() -> None:
    job = accepted(resources={"cpu": 0.1, "memory": "256Mi"})
    assert job.cpu_millis == 100


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_stored_spec_the_builder_refuses_fails_its_job_at_once_with_the_reason(engine: KubeSim) -> None:
    job = accepted(resources={"cpu": "100m", "memory": "64Mi"})
    spec = job.spec | {"volumes": [volume("/scratch") | {"read_only": False}]}
    Job.objects.filter(pk=job.pk).update(spec=spec)  # as if stored before the submit check existed

    job = wait_status(job, "failed", timeout=60)
    assert job.reason == "InvalidSpec" and "duplicate mount path: /scratch" in job.message, describe(job)
    assert JobEvent.objects.filter(job=job, to_status="starting").count() == 1, "launched once, not looped"
