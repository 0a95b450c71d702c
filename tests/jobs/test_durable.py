"""Service entry points open a durable transaction: a caller that wraps one in a transaction of its own fails
loudly (its on-commit pushes would wait for the caller, its writes share the caller's fate), and the paths
that compose services on purpose (retry, the admission cycle, the admin's delete, `seed_demo`) use
`.nested` and still work.

These tests commit for real (`transaction=True`): inside a test-case transaction Django lets a durable block
open directly under the test's own atomic block, so the refusal is only seen without one.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client, override_settings
from django.urls import reverse

from clusterio.capacity import NodeInfo, Resources
from jobs.core.choices import EventKind
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent
from jobs.scheduling import run_cycle
from jobs.services import job_cancel, job_delete, job_requeue, job_retry, job_submit, job_transition
from jobs.services.caps import result_release, result_reserve, result_room
from jobs.services.lifecycle import (
    job_admit,
    job_apply_verdict,
    job_deadline_exceeded,
    job_launched,
    job_pods_gone,
    job_repair,
    launch_refused,
    launch_requeued,
    learner_node_unready,
)
from jobs.services.logs import logs_append
from jobs.services.results import results_reported
from jobs.services.tensorboard import event_file_append
from jobs.services.tuning import job_autotune
from tenants.models import Membership
from tenants.policy import policy_set
from tenants.services import membership_remove, membership_set, quota_set, tenant_create
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {"name": "a", "image": "busybox", "command": ["echo", "hi"]}
ENTRY_POINTS: list[Callable[..., Any]] = [
    job_submit, job_cancel, job_retry, job_requeue, job_delete, job_transition, job_admit, job_launched,
    job_apply_verdict, job_deadline_exceeded, job_pods_gone, learner_node_unready, launch_refused, launch_requeued,
    job_repair, logs_append, results_reported, result_room, result_reserve, result_release,
    event_file_append, job_autotune, tenant_create,
    membership_set, membership_remove, policy_set, quota_set,
]  # fmt: skip


def test_every_service_entry_point_refuses_to_run_inside_a_callers_transaction() -> None:
    accepted = []
    for service in ENTRY_POINTS:
        # The durable block is refused as it opens, before the service looks at its arguments.
        with transaction.atomic():
            try:
                service()
            except RuntimeError as exc:
                assert "durable" in str(exc)
            else:
                accepted.append(service.__name__)
    assert not accepted, f"not durable: {accepted}"


def test_a_submit_wrapped_in_a_callers_transaction_fails_and_stores_nothing() -> None:
    tenant = make_tenant()
    user = member(tenant)
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        job_submit(tenant=tenant, user=user, document=SPEC)
    assert not Job.objects.exists()


def test_cancel_and_retry_compose_their_services_in_one_transaction() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    assert job_cancel(job=job, user=user).status == JobStatus.CANCELLED
    job.refresh_from_db()
    new = job_retry(job=job, user=user)
    assert new.pk != job.pk and new.status == JobStatus.QUEUED
    assert JobEvent.objects.filter(job=new, kind=EventKind.RETRY, data={"retry_of": job.pk}).exists()


def test_the_admission_cycle_admits_inside_its_own_transaction() -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    node = Resources(0, 8000, 32768)
    assert run_cycle(nodes=[NodeInfo("cpu-0", True, None, node, node)]).admitted == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING and job.placements == ["cpu-0"]


def test_the_admin_deletes_a_finished_job_inside_its_delete_views_transaction(
    client: Client, settings: Any
) -> None:
    settings.CHECKPOINT_CLAIM_SIZE = ""  # no claim to delete on a cluster: this test has none
    tenant = make_tenant()
    user = member(tenant)
    job = job_cancel(job=job_submit(tenant=tenant, user=user, document=SPEC), user=user)
    client.force_login(make_user(is_staff=True, is_superuser=True))
    response = client.post(reverse("admin:jobs_job_delete", args=[job.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()


@override_settings(LOCAL_SETUP=True)
def test_seed_demo_sets_the_membership_inside_its_own_transaction() -> None:
    call_command("seed_demo", stdout=io.StringIO())
    assert Membership.objects.get(user__username="demo", tenant__slug="demo").role == "member"
