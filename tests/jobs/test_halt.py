"""Halt and resume in the write layer: a waiting job halts at once, an admitted one once its pods are gone;
a halted job holds no quota and is never admitted; resume sends it back to the queue without using a retry,
and its next admission is a new attempt (which resumes from the checkpoint the claims keep)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from clusterio.capacity import NodeInfo, Resources
from jobs.core.choices import Reason, VerdictState
from jobs.core.podstate import Verdict
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent
from jobs.scheduling import run_cycle
from jobs.services import JobRejected, PermissionDenied, job_cancel, job_halt, job_resume, job_submit
from jobs.services.lifecycle import job_apply_verdict, job_pods_gone
from tenants.models import Tenant
from tenants.usage import tenant_usage
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

SPEC = """
name: halted
image: pytorch/pytorch:2.3
command: ["python", "train.py"]
learners: 2
resources: {gpus: 1, cpu: 1, memory: 1Gi}
"""
ROOM = Resources(4, 16000, 32768)
NODES = [NodeInfo("gpu-0", True, None, ROOM, ROOM)]


def running(tenant: Tenant, user: User) -> Job:
    """A job admitted by the cycle (attempt 1) whose pods run."""
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    assert job.pk in run_cycle(nodes=NODES).admitted
    verdict = Verdict(VerdictState.RUNNING, Reason.RUNNING, "2 learner(s) running")
    job_apply_verdict(job_id=job.pk, attempt=1, verdict=verdict)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.attempt == 1
    return job


def halted(tenant: Tenant, user: User) -> Job:
    job = running(tenant, user)
    job_halt(job=job, user=user)
    result = job_pods_gone(job_id=job.pk, attempt=1)
    assert result is not None and result.status == JobStatus.HALTED
    return result


def transitions(job: Job) -> list[tuple[str, str, str, str | None]]:
    events = JobEvent.objects.filter(job=job, kind="transition").order_by("pk")
    return [(e.from_status, e.to_status, e.reason, e.actor.username if e.actor else None) for e in events]


def test_halting_a_queued_job_halts_it_at_once_and_it_is_never_admitted() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_halt(job=job_submit(tenant=tenant, user=user, document=SPEC), user=user)
    assert job.status == JobStatus.HALTED and job.finished_at is None
    assert transitions(job) == [("queued", "halted", "HaltedByUser", user.username)]
    assert run_cycle(nodes=NODES).admitted == []
    assert tenant_usage(tenant).queued_jobs == 0


def test_halting_a_running_job_waits_for_its_pods_and_then_frees_the_quota() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = running(tenant, user)
    assert tenant_usage(tenant).gpus == 2

    job = job_halt(job=job, user=user)
    assert job.status == JobStatus.HALTING
    assert tenant_usage(tenant).gpus == 2, "terminating pods still hold the quota"
    failed = Verdict(VerdictState.FAILED, "Error", "learner 0 exited 143", 0)
    assert job_apply_verdict(job_id=job.pk, attempt=1, verdict=failed) is None, "stopping pods say nothing"
    assert job_pods_gone(job_id=job.pk, attempt=0) is None, "another attempt's pods"

    gone = job_pods_gone(job_id=job.pk, attempt=1)
    assert gone is not None and gone.status == JobStatus.HALTED and gone.reason == Reason.HALTED
    assert tenant_usage(tenant).gpus == 0
    assert transitions(gone)[-2:] == [
        ("running", "halting", "HaltedByUser", user.username),
        ("halting", "halted", "Halted", None),
    ]


def test_resume_requeues_without_using_a_retry_and_the_next_admission_is_a_new_attempt() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = halted(tenant, user)

    job = job_resume(job=job, user=user)
    assert job.status == JobStatus.REQUEUED and job.reason == Reason.RESUMED
    event = JobEvent.objects.filter(job=job, to_status="requeued").get()
    assert (event.from_status, event.actor, event.data) == ("halted", user, {"counts": False})
    assert run_cycle(nodes=NODES).admitted == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING and job.attempt == 2


def test_a_halted_jobs_quota_goes_to_the_next_job_in_the_queue() -> None:
    tenant = make_tenant(gpus=2)
    user = member(tenant)
    first = running(tenant, user)
    second = job_submit(tenant=tenant, user=user, document=SPEC)
    assert run_cycle(nodes=NODES).admitted == [], "the quota is full"

    job_halt(job=first, user=user)
    assert run_cycle(nodes=NODES).admitted == [], "still full while the pods stop"
    job_pods_gone(job_id=first.pk, attempt=1)
    assert run_cycle(nodes=NODES).admitted == [second.pk]

    job_resume(job=first, user=user)
    assert run_cycle(nodes=NODES).admitted == [], "resumed, it waits its turn like any job"
    first.refresh_from_db()
    assert first.status == JobStatus.REQUEUED


def test_halt_and_resume_refuse_moves_the_state_does_not_allow_with_409_and_change_nothing() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = running(tenant, user)
    with pytest.raises(
        JobRejected, match=f"only a halted job can be resumed; job {job.pk} is running"
    ) as info:
        job_resume(job=job, user=user)
    assert info.value.status == 409

    job_cancel(job=job, user=user)
    with pytest.raises(JobRejected, match="only a queued, starting or running job can be halted") as info:
        job_halt(job=job, user=user)
    assert info.value.status == 409
    cancelled = job_cancel(job=job_submit(tenant=tenant, user=user, document=SPEC), user=user)
    with pytest.raises(JobRejected, match="is cancelled \\(a final state\\)"):
        job_halt(job=cancelled, user=user)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLING
    assert not JobEvent.objects.filter(reason__in=[Reason.HALTED_BY_USER, Reason.RESUMED]).exists()


def test_halting_twice_changes_nothing_and_a_halted_job_can_be_cancelled_at_once() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = halted(tenant, user)
    events = job.events.count()
    assert job_halt(job=job, user=user).status == JobStatus.HALTED
    assert job.events.count() == events
    job = job_cancel(job=job, user=user)
    assert job.status == JobStatus.CANCELLED and job.finished_at is not None


def test_viewers_may_not_halt_or_resume_and_members_only_their_own_jobs() -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    for user in (member(tenant, "viewer"), member(tenant)):
        with pytest.raises(PermissionDenied, match="you may not halt this job"):
            job_halt(job=job, user=user)
    job = job_halt(job=job, user=member(tenant, "owner"))
    with pytest.raises(PermissionDenied, match="you may not resume this job"):
        job_resume(job=job, user=member(tenant, "viewer"))
    job.refresh_from_db()
    assert job.status == JobStatus.HALTED
