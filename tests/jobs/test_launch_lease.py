"""The launch lease (one launch chain per attempt) and the holds that keep a job out of admission, against
PostgreSQL: a second chain is refused while the first holds the attempt, an expired lease or a newer attempt
frees it, and a held job is left out of admission's snapshot until released."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs import tasks
from jobs.models import Job
from jobs.scheduling import build_snapshot
from jobs.services.launches import holds_release, launch_lease_drop, launch_lease_take, launching
from tests.factories import make_job, make_tenant

pytestmark = pytest.mark.django_db


def starting(attempt: int = 1) -> Job:
    return make_job(status="starting", attempt=attempt)


def test_a_second_launch_chain_is_refused_while_the_first_holds_the_attempt() -> None:
    job = starting()
    assert launch_lease_take(job_id=job.pk, attempt=1, token="first", seconds=60)
    assert not launch_lease_take(job_id=job.pk, attempt=1, token="second", seconds=60)
    assert launch_lease_take(job_id=job.pk, attempt=1, token="first", seconds=90), "the holder extends it"
    job.refresh_from_db()
    assert launching(job)
    launch_lease_drop(job_id=job.pk, attempt=1, token="first")
    job.refresh_from_db()
    assert not launching(job)
    assert launch_lease_take(job_id=job.pk, attempt=1, token="second", seconds=60)


def test_an_expired_lease_or_a_newer_attempt_frees_the_launch() -> None:
    job = starting()
    assert launch_lease_take(job_id=job.pk, attempt=1, token="dead-worker", seconds=60)
    Job.objects.filter(pk=job.pk).update(launch_lease_until=timezone.now() - timedelta(seconds=1))
    assert launch_lease_take(job_id=job.pk, attempt=1, token="next", seconds=60)
    Job.objects.filter(pk=job.pk).update(attempt=2)
    assert not launch_lease_take(job_id=job.pk, attempt=1, token="late", seconds=60), "attempt 1 is over"
    assert launch_lease_take(job_id=job.pk, attempt=2, token="fresh", seconds=60)
    assert not launch_lease_take(job_id=starting().pk, attempt=2, token="x", seconds=60), "not its attempt"
    assert not launch_lease_take(job_id=make_job().pk, attempt=0, token="x", seconds=60), "not starting"


def test_a_held_job_is_left_out_of_admission_until_released() -> None:
    held = make_job(
        status="requeued", attempt=1, held_until=timezone.now() + timedelta(hours=1), held_on="quota:ns:q:abc"
    )
    free = make_job()
    offered = {j.id for j in build_snapshot(nodes=[], now=timezone.now().timestamp()).jobs}
    assert offered == {free.pk}
    assert holds_release(keys=["quota:ns:q:other"]) == 0
    assert holds_release(keys=["quota:ns:q:abc"]) == 1
    offered = {j.id for j in build_snapshot(nodes=[], now=timezone.now().timestamp()).jobs}
    assert offered == {free.pk, held.pk}


def test_a_job_held_on_a_namespace_is_released_once_another_prefix_names_another_one(settings: Any) -> None:
    settings.TENANT_NAMESPACE_PREFIX = "ty"
    tenant = make_tenant()
    held = make_job(
        tenant,
        status="requeued",
        attempt=1,
        held_until=timezone.now() + timedelta(hours=1),
        held_on=f"namespace:ty-{tenant.slug}:{tenant.slug}",
    )
    settings.TENANT_NAMESPACE_PREFIX = "ml"  # no cluster is asked: the namespace is not the tenant's now
    assert tasks.release_holds() == 1
    held.refresh_from_db()
    assert (held.held_until, held.held_on) == (None, "")
