"""Idle GPUs from recorded DCGM telemetry (tests/jobs/data/dcgm_idle_gpu_series.json: synthetic but
format-faithful, no GPU machine was available): the pure detector over the series, then the check on a
running GPU job's telemetry rows: the flag on its page, the owner's `idle_gpu` notification, the halt
where the tenant's policy says so (and none without it), and the flag cleared when the GPUs work again."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone

from clusterio import gpumetrics
from jobs.core.choices import EventKind, Reason
from jobs.core.tuning.idle import GpuLook, busiest, idle_verdict
from jobs.models import Job, TelemetrySample
from jobs.notifications.choices import Event
from jobs.notifications.delivery import deliver
from jobs.notifications.models import Notification
from jobs.notifications.services import subscription_create
from jobs.notifications.verification import subscription_verify, verification_token
from jobs.services.idlegpu import idle_gpu_check_running, job_idle_gpu_check
from jobs.services.lifecycle import job_pods_gone, transition
from tenants.models import Policy, Tenant
from tests.factories import make_job, make_tenant, member

SERIES = json.loads((Path(__file__).parent / "data" / "dcgm_idle_gpu_series.json").read_text())
NS, POD = "ty-vision", "job-0"
IDLE = {"IDLE_GPU_THRESHOLD": 0.05, "IDLE_GPU_WINDOW_SECONDS": 60.0, "TELEMETRY_INTERVAL_SECONDS": 10.0}


def readings(namespace: str = NS, pod: str = POD) -> list[tuple[int, float | None]]:
    """(seconds, the pod's mean GPU use) per recorded reading, as the platform parses the exporter."""
    out = []
    for reading in SERIES["readings"]:
        text = reading["metrics"].replace("{namespace}", namespace).replace("{pod}", pod)
        out.append((reading["t"], gpumetrics.parse(text).get((namespace, pod))))
    return out


def test_the_recorded_series_is_busy_then_idle() -> None:
    values = readings()
    assert all(u is not None and u >= 0.8 for t, u in values if t <= SERIES["busy_until_t"])
    assert all(u is not None and u <= 0.03 for t, u in values if t > SERIES["busy_until_t"])


@pytest.mark.parametrize(("upto", "idle"), [(110, False), (170, False), (180, True), (290, True)])
def test_the_detector_calls_the_job_idle_once_the_spell_spans_the_window(upto: int, idle: bool) -> None:
    looks = [GpuLook(float(t), u) for t, u in readings() if t <= upto]
    verdict = idle_verdict(looks, threshold=0.05, window_seconds=60)
    assert verdict.idle is idle and verdict.busy is (upto <= SERIES["busy_until_t"])
    if upto > SERIES["busy_until_t"]:
        assert verdict.since == 120.0 and verdict.peak is not None and verdict.peak < 0.05
    if idle:
        assert f"for {upto - 120} s" in verdict.reason


def test_a_missing_reading_or_one_busy_learner_ends_the_spell() -> None:
    looks = [GpuLook(float(t), u) for t, u in readings()]
    gap = [*looks[:20], GpuLook(looks[20].ts, None), *looks[21:]]
    verdict = idle_verdict(gap, threshold=0.05, window_seconds=60)
    assert verdict.since == looks[21].ts and verdict.idle  # 80 s since the gap
    assert not idle_verdict(gap[:25], threshold=0.05, window_seconds=60).idle  # 30 s since the gap
    assert not idle_verdict(gap[:21], threshold=0.05, window_seconds=60).busy  # no reading: not busy
    assert busiest([0.01, 0.9]) == 0.9 and busiest([0.01, None]) is None and busiest([]) is None
    assert idle_verdict([], threshold=0.05, window_seconds=60).reason == "no GPU reading yet"


# --- the check on a job's telemetry ---------------------------------------------------------------------


def running_gpu_job(tenant: Tenant, owner: Any) -> Job:
    job = make_job(tenant, owner, gpus=1)
    for to in ("starting", "running"):
        with transaction.atomic():
            job = transition(Job.objects.select_for_update().get(pk=job.pk), to, reason="Test")
    return job


def record(job: Job, start: datetime, upto: int) -> datetime:
    """Store the series' looks up to `upto` seconds as the job's telemetry; returns the last look's time."""
    for t, util in readings():
        if t <= upto:
            TelemetrySample.objects.create(
                job=job, attempt=job.attempt, learner=0, ts=start + timedelta(seconds=t),
                cpu_millis_used=500, cpu_millis_limit=1000, memory_mib_used=100, memory_mib_limit=1024,
                gpu_util=util,
            )  # fmt: skip
    return start + timedelta(seconds=upto)


@pytest.mark.django_db
@override_settings(**IDLE)
def test_an_idle_job_is_flagged_on_its_page_and_to_its_owner_and_never_halted_without_a_policy(
    client: Client, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    tenant = make_tenant()
    owner, colleague = member(tenant), member(tenant)
    mail_to: dict[str, Any] = {"channel": "email", "email": "me@example.com", "events": ["idle_gpu"]}
    mine = subscription_create(user=owner, tenant=tenant, name="idle", **mail_to).subscription
    subscription_verify(subscription=mine, token=verification_token(mine))  # the owner opened the link
    subscription_create(user=colleague, tenant=tenant, name="theirs", **mail_to)  # hears of their own jobs
    job = running_gpu_job(tenant, owner)
    start = timezone.now() - timedelta(hours=1)
    busy_now = record(job, start, 150)
    assert job_idle_gpu_check(job_id=job.pk, now=busy_now).action == ""  # idle 30 s of 60
    client.force_login(owner)
    assert "data-idle-gpu" not in client.get(f"/jobs/{job.pk}/").content.decode()
    now = record(job, start, 190)
    with django_capture_on_commit_callbacks(execute=True):
        check = job_idle_gpu_check(job_id=job.pk, now=now)
    assert check is not None and check.action == "flagged" and check.verdict.idle
    (note,) = Notification.objects.all()
    assert note.event == Event.IDLE_GPU and note.job_id == job.pk and note.subscription.user == owner
    assert "has idle GPUs: GPUs below 5% (at most 2%) for 70 s" in note.payload["text"]
    deliver(note.pk)
    (message,) = mail.outbox
    assert "idle_gpu" in message.subject and "has idle GPUs" in message.body
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "data-idle-gpu" in page and "Halt it to give its GPUs back" in page
    parts = client.get(f"/jobs/{job.pk}/parts/").json()
    assert "data-idle-gpu" in parts["gpu"]
    later = record(job, start, 290) + timedelta(days=2)
    assert job_idle_gpu_check(job_id=job.pk, now=later).action == ""  # flagged once, never halted
    job.refresh_from_db()
    assert job.status == "running" and Notification.objects.count() == 1
    assert job.events.filter(kind=EventKind.GPU, reason=Reason.IDLE_GPU).count() == 1


@pytest.mark.django_db
@override_settings(**IDLE)
def test_the_tenants_policy_halts_an_idle_job_after_its_grace_and_it_can_be_resumed(
    client: Client, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    tenant = make_tenant()
    Policy.objects.create(tenant=tenant, idle_gpu_halt_after_seconds=60)
    owner = member(tenant)
    subscription_create(
        user=owner, tenant=tenant, name="hook", channel="email", email="me@example.com", events=["halted"]
    )
    job = running_gpu_job(tenant, owner)
    start = timezone.now() - timedelta(hours=1)
    flagged_at = record(job, start, 190)
    check = job_idle_gpu_check(job_id=job.pk, now=flagged_at)
    assert check is not None and check.action == "flagged"
    client.force_login(owner)
    assert "The tenant's policy halts it at" in client.get(f"/jobs/{job.pk}/").content.decode()
    assert job_idle_gpu_check(job_id=job.pk, now=record(job, start, 240)).action == ""  # 50 s of 60
    with django_capture_on_commit_callbacks(execute=False):
        check = job_idle_gpu_check(job_id=job.pk, now=record(job, start, 250))
    assert check is not None and check.action == "halted"
    job.refresh_from_db()
    assert job.status == "halting" and job.reason == Reason.IDLE_GPU_HALTED
    assert "idle-GPU policy" in job.message and "flagged 60 s ago" in job.message
    job_pods_gone(job_id=job.pk, attempt=job.attempt)  # as the teardown does once the pods are gone
    job.refresh_from_db()
    assert job.status == "halted" and job.reason == Reason.IDLE_GPU_HALTED
    (note,) = Notification.objects.filter(event=Event.HALTED)
    assert "IdleGpuHalted" in note.payload["text"] and "idle-GPU policy" in note.payload["text"]
    assert "Resume" in client.get(f"/jobs/{job.pk}/").content.decode()


@pytest.mark.django_db
@override_settings(**IDLE)
def test_busy_gpus_clear_the_flag_and_restart_the_grace() -> None:
    tenant = make_tenant()
    Policy.objects.create(tenant=tenant, idle_gpu_halt_after_seconds=60)
    owner = member(tenant)
    job = running_gpu_job(tenant, owner)
    start = timezone.now() - timedelta(hours=1)
    now = record(job, start, 190)
    assert idle_gpu_check_running(now=now) == {"jobs": 1, "flagged": 1, "cleared": 0, "halted": 0}
    TelemetrySample.objects.create(
        job=job, attempt=job.attempt, learner=0, ts=now + timedelta(seconds=10), cpu_millis_used=500,
        cpu_millis_limit=1000, memory_mib_used=100, memory_mib_limit=1024, gpu_util=0.9,
    )  # fmt: skip
    check = job_idle_gpu_check(job_id=job.pk, now=now + timedelta(seconds=10))
    assert check is not None and check.action == "cleared"
    assert job.events.filter(kind=EventKind.GPU).latest("created_at").reason == Reason.GPU_BUSY
    job.refresh_from_db()
    assert job.status == "running"
    cpu_job = running_gpu_job(tenant, owner)
    Job.objects.filter(pk=cpu_job.pk).update(gpus=0)
    assert job_idle_gpu_check(job_id=cpu_job.pk, now=now) is None  # no GPUs, nothing to judge


@pytest.mark.django_db
def test_admins_set_the_idle_gpu_halt_through_the_policy_api() -> None:
    from tests.factories import make_user

    tenant = make_tenant(slug="vision")
    admin = make_user(is_superuser=True, is_staff=True)
    api = Client()
    api.force_login(admin)
    url = "/api/v1/tenants/vision/policy/"
    assert api.get(url).json()["idle_gpu_halt_after_seconds"] is None
    for bad in ("soon", -1, 10**9, True):
        answer = api.patch(url, {"idle_gpu_halt_after_seconds": bad}, content_type="application/json")
        assert answer.status_code == 400 and set(answer.json()["errors"]) == {"idle_gpu_halt_after_seconds"}
    good = api.patch(url, {"idle_gpu_halt_after_seconds": 900}, content_type="application/json")
    assert good.status_code == 200 and good.json()["idle_gpu_halt_after_seconds"] == 900
    assert Policy.objects.get(tenant=tenant).idle_gpu_halt_after_seconds == 900
    off = api.patch(url, {"idle_gpu_halt_after_seconds": None}, content_type="application/json")
    assert off.status_code == 200 and Policy.objects.get(tenant=tenant).idle_gpu_halt_after_seconds is None
    member_client = Client()
    member_client.force_login(member(tenant, "owner"))
    refused = member_client.patch(url, {"idle_gpu_halt_after_seconds": 5}, content_type="application/json")
    assert refused.status_code == 403


@pytest.mark.django_db
def test_the_admin_console_sets_the_idle_gpu_halt_with_the_same_checks() -> None:
    from tenants.admin import PolicyForm

    tenant = make_tenant()
    base = {
        "host_path_prefixes": "[]", "image_registries": "[]", "datastore_hosts": "[]",
        "member_max_priority": "0", "owner_max_priority": "100", "pod_security": "restricted",
    }  # fmt: skip
    form = PolicyForm(data=base | {"idle_gpu_halt_after_seconds": "99999999"}, instance=Policy(tenant=tenant))
    assert not form.is_valid() and "from 0 to" in form.errors["idle_gpu_halt_after_seconds"][0]
    form = PolicyForm(data=base | {"idle_gpu_halt_after_seconds": "1800"}, instance=Policy(tenant=tenant))
    assert form.is_valid(), form.errors
    assert form.save().idle_gpu_halt_after_seconds == 1800
    form = PolicyForm(
        data=base | {"idle_gpu_halt_after_seconds": ""}, instance=Policy.objects.get(tenant=tenant)
    )
    assert form.is_valid(), form.errors
    assert form.save().idle_gpu_halt_after_seconds is None
