"""Preemption through the scheduler cycle and the write layer: a lender below its nominal quota takes back
what a borrower holds, the victim stops gracefully (halting), goes back to the queue once its pods are gone
(reason Preempted, no retry used), and the lender's job starts; priority preemption only where the tenant's
policy allows; the minimum runtime (doubled per earlier preemption) and PREEMPTION=off are respected."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from clusterio.capacity import NodeInfo, Resources
from jobs.core.choices import Reason, VerdictState
from jobs.core.podstate import Verdict
from jobs.core.preemption import Victim
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent, Learner
from jobs.preemption import running_jobs
from jobs.scheduling import run_cycle
from jobs.services import job_halt, job_submit
from jobs.services.lifecycle import job_apply_verdict, job_pods_gone
from jobs.services.logs import logs_append
from tenants.models import Policy, Tenant
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.django_db
ROOM = Resources(8, 64000, 262144)


def nodes(free_gpus: int) -> list[NodeInfo]:
    return [NodeInfo("n0", True, None, ROOM, Resources(free_gpus, 64000 - 2000, 262144 - 2048))]


def spec(gpus: int, priority: int = 0) -> str:
    return (
        "name: p\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\n"
        f"priority: {priority}\nresources: {{gpus: {gpus}, cpu: 1, memory: 1Gi}}\n"
    )


def run(tenant: Tenant, gpus: int, free: int, *, hours_ago: float = 1.0, priority: int = 0) -> Job:
    """A job of `tenant` admitted on `free` GPUs and running since `hours_ago`."""
    user = tenant.memberships.first().user if tenant.memberships.exists() else member(tenant, role="owner")
    job = job_submit(tenant=tenant, user=user, document=spec(gpus, priority))
    assert job.pk in run_cycle(nodes=nodes(free)).admitted
    verdict = Verdict(VerdictState.RUNNING, Reason.RUNNING, "running")
    job_apply_verdict(job_id=job.pk, attempt=job.attempt + 1, verdict=verdict)
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now() - timedelta(hours=hours_ago))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    return job


def checkpoint(job: Job, step: int) -> None:
    """The learner prints a checkpoint line, as the example trainer does."""
    now = timezone.now()
    logs_append(
        job_id=job.pk,
        attempt=job.attempt,
        learner=0,
        records=[(now, f'{{"checkpoint": {step}}}')],
        cursor=(now, 1),
    )


@pytest.fixture
def borrowed_cluster() -> dict[str, Any]:
    """Tenant b (nominal 0, may borrow) holds the whole 8-GPU node with two jobs; a (nominal 8) has none."""
    a = make_tenant(gpus=8)
    b = make_tenant(gpus=0, gpus_borrowing_limit=None)
    for tenant in (a, b):
        member(tenant, role="owner")
    b1 = run(b, 4, free=8)
    b2 = run(b, 4, free=4)
    return {"a": a, "b": b, "b1": b1, "b2": b2}


def test_checkpoint_lines_are_recorded_on_the_learner(borrowed_cluster: dict[str, Any]) -> None:
    b1 = borrowed_cluster["b1"]
    checkpoint(b1, 120)
    learner = Learner.objects.get(job=b1, attempt=1, index=0)
    assert learner.checkpoint_step == 120 and learner.checkpoint_at is not None
    assert b1.metric_samples.filter(name="checkpoint", step=120).exists()


def test_a_lender_takes_back_its_quota_from_the_job_that_loses_least(
    borrowed_cluster: dict[str, Any],
) -> None:
    a, b1, b2 = borrowed_cluster["a"], borrowed_cluster["b1"], borrowed_cluster["b2"]
    checkpoint(b1, 300)  # b1 saved just now; b2 never did in its hour of running
    user = a.memberships.get().user
    lender_job = job_submit(tenant=a, user=user, document=spec(4))

    result = run_cycle(nodes=nodes(0))
    assert result.admitted == [] and result.preempted == [b1.pk]
    b1.refresh_from_db()
    assert (b1.status, b1.reason) == (JobStatus.HALTING, Reason.PREEMPTED)
    event = b1.events.get(to_status=JobStatus.HALTING)
    assert event.data["kind"] == "reclaim" and event.data["by_tenant"] == a.slug
    assert "by_job" not in event.data and lender_job.pk not in event.message
    assert f"tenant {a.slug} takes back" in event.message and "GPU-hours" in event.message
    assert event.data["lost_gpu_seconds"] < 4 * 60, "b1 checkpointed moments ago"
    note = lender_job.events.get(reason=Reason.PREEMPTING)
    assert "1 job(s) of other tenants" in note.message and b1.pk not in note.message

    # while b1 saves its work, no other job is stopped for the same need
    assert run_cycle(nodes=nodes(0)).preempted == []
    assert Job.objects.get(pk=b2.pk).status == JobStatus.RUNNING

    requeued = job_pods_gone(job_id=b1.pk, attempt=1)
    assert requeued is not None and (requeued.status, requeued.reason) == (
        JobStatus.REQUEUED,
        Reason.PREEMPTED,
    )
    assert requeued.events.get(to_status=JobStatus.REQUEUED).data["counts"] is False, "no retry used"

    # the freed GPUs go to the lender (b, far above its nominal share, waits with its preempted job)
    result = run_cycle(nodes=nodes(4))
    assert result.admitted == [lender_job.pk] and result.preempted == []
    lender_job.refresh_from_db()
    assert lender_job.status == JobStatus.STARTING and not lender_job.borrowed


def test_youngest_order_takes_the_latest_admitted_whatever_it_loses(
    borrowed_cluster: dict[str, Any], settings: Any
) -> None:
    settings.PREEMPTION = "youngest"
    a, b1, b2 = borrowed_cluster["a"], borrowed_cluster["b1"], borrowed_cluster["b2"]
    Job.objects.filter(pk=b1.pk).update(admitted_at=timezone.now() - timedelta(minutes=10))
    checkpoint(b1, 300)
    job_submit(tenant=a, user=a.memberships.get().user, document=spec(4))
    assert run_cycle(nodes=nodes(0)).preempted == [b1.pk]
    settings.PREEMPTION = "off"
    job_pods_gone(job_id=b1.pk, attempt=1)
    assert run_cycle(nodes=nodes(0)).preempted == []
    assert Job.objects.get(pk=b2.pk).status == JobStatus.RUNNING


def test_jobs_inside_the_minimum_runtime_are_not_preempted(
    borrowed_cluster: dict[str, Any], settings: Any
) -> None:
    a = borrowed_cluster["a"]
    settings.PREEMPTION_MIN_RUNTIME_SECONDS = 2 * 3600
    job = job_submit(tenant=a, user=a.memberships.get().user, document=spec(4))
    assert run_cycle(nodes=nodes(0)).preempted == []
    assert not JobEvent.objects.filter(reason=Reason.PREEMPTED).exists()
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def test_a_job_preempted_before_is_protected_twice_as_long_per_earlier_preemption(
    borrowed_cluster: dict[str, Any],
) -> None:
    a, b1, b2 = borrowed_cluster["a"], borrowed_cluster["b1"], borrowed_cluster["b2"]
    checkpoint(b1, 300)  # b1 is the cheaper victim, as in the first test
    # but it was preempted once before and re-admitted 8 minutes ago: protected for 2 x 300 s
    JobEvent.objects.create(
        job=b1, kind="transition", from_status=JobStatus.HALTING, to_status=JobStatus.REQUEUED,
        reason=Reason.PREEMPTED,
    )  # fmt: skip
    JobEvent.objects.create(job=b1, kind="transition", to_status=JobStatus.REQUEUED, reason="Retry")
    Job.objects.filter(pk=b1.pk).update(admitted_at=timezone.now() - timedelta(minutes=8))
    job_submit(tenant=a, user=a.memberships.get().user, document=spec(4))
    assert run_cycle(nodes=nodes(0)).preempted == [b2.pk]


def test_preemption_off_preempts_nothing(borrowed_cluster: dict[str, Any], settings: Any) -> None:
    settings.PREEMPTION = "off"
    a = borrowed_cluster["a"]
    job_submit(tenant=a, user=a.memberships.get().user, document=spec(4))
    assert run_cycle(nodes=nodes(0)).preempted == []


def test_halting_a_job_being_preempted_ends_it_halted(borrowed_cluster: dict[str, Any]) -> None:
    a, b, b1 = borrowed_cluster["a"], borrowed_cluster["b"], borrowed_cluster["b1"]
    checkpoint(b1, 10)
    job_submit(tenant=a, user=a.memberships.get().user, document=spec(4))
    assert run_cycle(nodes=nodes(0)).preempted == [b1.pk]
    owner = b.memberships.get().user
    job_halt(job=b1, user=owner)
    gone = job_pods_gone(job_id=b1.pk, attempt=1)
    assert gone is not None and (gone.status, gone.reason) == (JobStatus.HALTED, Reason.HALTED)


def test_priority_preemption_within_a_tenant_only_where_its_policy_allows() -> None:
    tenant = make_tenant(gpus=8)
    member(tenant, role="owner")
    low = run(tenant, 8, free=8, priority=0)
    user = tenant.memberships.get().user
    high = job_submit(tenant=tenant, user=user, document=spec(8, priority=5))
    assert run_cycle(nodes=nodes(0)).preempted == []

    Policy.objects.create(tenant=tenant, preempt_lower_priority=True)
    assert run_cycle(nodes=nodes(0)).preempted == [low.pk]
    event = Job.objects.get(pk=low.pk).events.get(to_status=JobStatus.HALTING)
    assert event.data["kind"] == "priority" and event.data["by_job"] == high.pk
    assert high.pk in event.message

    job_pods_gone(job_id=low.pk, attempt=1)
    assert run_cycle(nodes=nodes(8)).admitted == [high.pk]


def test_equal_priority_jobs_are_never_preempted_for_each_other() -> None:
    tenant = make_tenant(gpus=8)
    member(tenant, role="owner")
    Policy.objects.create(tenant=tenant, preempt_lower_priority=True)
    run(tenant, 8, free=8, priority=3)
    job_submit(tenant=tenant, user=tenant.memberships.get().user, document=spec(8, priority=3))
    assert run_cycle(nodes=nodes(0)).preempted == []


def test_victims_carry_their_current_attempts_latest_checkpoint_and_their_preemption_count(
    settings: Any,
) -> None:
    tenant = make_tenant()
    started = timezone.now() - timedelta(hours=1)
    job = make_job(tenant, status=JobStatus.RUNNING, attempt=2, placements=["n0"], admitted_at=started)
    other = make_job(tenant, status=JobStatus.RUNNING, attempt=1, placements=["n0"], admitted_at=started)
    for attempt, index, minutes_ago in ((1, 0, 1), (2, 0, 30), (2, 1, 20), (2, 2, None)):
        Learner.objects.create(
            job=job, attempt=attempt, index=index, pod_name=f"p-{attempt}-{index}",
            checkpoint_at=None if minutes_ago is None else timezone.now() - timedelta(minutes=minutes_ago),
        )  # fmt: skip
    for reason in (Reason.PREEMPTED, Reason.PREEMPTED, "Retry"):
        JobEvent.objects.create(job=job, kind="transition", to_status=JobStatus.REQUEUED, reason=reason)
    JobEvent.objects.create(job=job, kind="transition", to_status=JobStatus.HALTING, reason=Reason.PREEMPTED)
    now = timezone.now().timestamp()

    def victims(minimum: int) -> dict[str, Victim]:
        settings.PREEMPTION_MIN_RUNTIME_SECONDS = minimum
        found, releasing = running_jobs(now)
        assert releasing == []
        return {v.job_id: v for v in found}

    found = victims(1000)
    # the latest checkpoint of its current attempt (20 min ago), not attempt 1's later one
    assert 19 * 60 < found[job.pk].since_checkpoint < 21 * 60
    assert 59 * 60 < found[other.pk].since_checkpoint < 61 * 60  # no checkpoint: since its admission
    # two earlier preemptions (requeued, Preempted): protected for 4 x the minimum runtime, no more
    assert found[job.pk].protected and not found[other.pk].protected
    assert not victims(800)[job.pk].protected
