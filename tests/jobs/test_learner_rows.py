"""What the job page's learner rows and times are made of: a learner's reason follows its pod (a waiting
reason goes once the container runs), and the attempts as the transitions tell them (when each was admitted
and started, and whether a halt or cancel stopped it)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.core.podstate import LearnerView
from jobs.models import JobEvent, Learner
from jobs.selectors import job_attempts
from jobs.services.lifecycle import learner_update
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def test_a_learner_that_runs_no_longer_shows_podinitializing() -> None:
    job = make_job(status="starting", attempt=1)
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="p-0")
    learner_update(job_id=job.pk, attempt=1, view=LearnerView(0, "Pending", waiting_reason="PodInitializing"))
    assert Learner.objects.values_list("phase", "reason").get() == ("Pending", "PodInitializing")
    learner_update(job_id=job.pk, attempt=1, view=LearnerView(0, "Running", node="n1"))
    assert Learner.objects.values_list("phase", "reason", "node").get() == ("Running", "", "n1")
    learner_update(
        job_id=job.pk, attempt=1, view=LearnerView(0, "Failed", exit_code=1, terminated_reason="Error")
    )
    learner_update(job_id=job.pk, attempt=1, view=LearnerView(0, None))  # the pod is gone: its end stays
    assert Learner.objects.values_list("phase", "reason", "exit_code").get() == ("Deleted", "Error", 1)


def test_attempts_follow_the_transitions_a_halt_stops_one_and_a_resume_opens_the_next() -> None:
    job = make_job(status="running", attempt=2)
    t0 = timezone.now() - timedelta(hours=1)
    moves = [
        ("queued", "starting"), ("starting", "running"), ("running", "halting"), ("halting", "halted"),
        ("halted", "requeued"), ("requeued", "starting"), ("starting", "running"),
    ]  # fmt: skip
    for minute, (before, after) in enumerate(moves):
        JobEvent.objects.create(
            job=job,
            kind="transition",
            from_status=before,
            to_status=after,
            created_at=t0 + timedelta(minutes=minute),
        )
    attempts = job_attempts(job=job)
    assert sorted(attempts) == [1, 2]
    first, second = attempts[1], attempts[2]
    assert (first.admitted_at, first.started_at, first.stopped) == (t0, t0 + timedelta(minutes=1), "halted")
    assert (second.admitted_at, second.started_at, second.stopped) == (
        t0 + timedelta(minutes=5),
        t0 + timedelta(minutes=6),
        "",
    )
