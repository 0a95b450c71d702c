"""Log ingest: capped per learner and attempt, with one marker and one event, and never in the way of the
job's state changes (no lock on the job row, user patterns outside the transaction)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from jobs.core.choices import Reason
from jobs.core.logcaps import MARKER_PREFIX
from jobs.models import Job, JobEvent, Learner, LogLine, MetricSample
from jobs.services import logs as logs_service
from jobs.services.logs import logs_append
from tenants.models import Policy
from tests.factories import allow, make_job, make_tenant, make_user, member

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def learner_of(job: Job) -> Learner:
    return Learner.objects.create(job=job, attempt=1, index=0, pod_name="p")


def append(job: Job, texts: list[str], second: int = 0) -> list[LogLine]:
    ts = T0 + timedelta(seconds=second)
    return logs_append(
        job_id=job.pk, attempt=1, learner=0, records=[(ts, t) for t in texts], cursor=(ts, len(texts))
    )


def stored(job: Job) -> list[str]:
    return list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


@pytest.mark.django_db
def test_lines_past_the_total_cap_are_dropped_with_one_marker_and_one_event(settings: Any) -> None:
    settings.LOG_MAX_LINES = 5
    job = make_job()
    learner_of(job)
    append(job, [f"line {i}" for i in range(4)], second=0)
    append(job, [f"line {i}" for i in range(4, 8)], second=1)
    append(job, [f"line {i}" for i in range(8, 20)], second=2)
    lines = stored(job)
    assert lines[:5] == [f"line {i}" for i in range(5)]
    assert len(lines) == 6 and lines[5].startswith(MARKER_PREFIX) and "more than 5 lines" in lines[5]
    seqs = LogLine.objects.filter(job=job).order_by("seq").values_list("seq", flat=True)
    assert list(seqs) == list(range(1, 7))
    [event] = JobEvent.objects.filter(job=job, reason=Reason.LOGS_TRUNCATED)
    assert event.kind == "logs" and event.data["exceeded"] == "more than 5 lines in this attempt"
    assert event.data["caps"]["lines"] == 5 and event.data["learner"] == 0
    row = Learner.objects.get(job=job)
    assert (row.log_lines, row.log_dropped, row.log_truncated, row.log_seq) == (6, 15, True, 6)


@pytest.mark.django_db
def test_a_burst_over_the_rate_cap_loses_only_its_excess_and_the_next_second_is_stored(settings: Any) -> None:
    settings.LOG_MAX_LINES_PER_SECOND = 3
    job = make_job()
    learner_of(job)
    append(job, [f"a{i}" for i in range(10)], second=0)
    append(job, ["b0", "b1"], second=1)
    append(job, [f"c{i}" for i in range(10)], second=2)
    lines = stored(job)
    assert lines[:3] == ["a0", "a1", "a2"] and "more than 3 lines in one second" in lines[3]
    assert lines[4:] == ["b0", "b1", "c0", "c1", "c2"], "one marker only, later drops are silent"
    assert JobEvent.objects.filter(job=job, reason=Reason.LOGS_TRUNCATED).count() == 1


@pytest.mark.django_db
def test_the_tenants_policy_overrides_the_default_caps(settings: Any) -> None:
    settings.LOG_MAX_BYTES = 10**9
    tenant = allow(make_tenant(), log_max_bytes=25)
    job = make_job(tenant=tenant)
    learner_of(job)
    append(job, ["x" * 10, "y" * 10, "z" * 10])
    lines = stored(job)
    assert lines[:2] == ["x" * 10, "y" * 10] and "more than 25 bytes in this attempt" in lines[2]


@pytest.mark.django_db
def test_metric_lines_past_the_cap_give_no_points(settings: Any) -> None:
    settings.LOG_MAX_LINES = 2
    job = make_job()
    learner_of(job)
    append(job, [f"step={i} loss=0.{i}" for i in range(5)])
    assert list(MetricSample.objects.filter(job=job).values_list("step", flat=True)) == [0, 1]


@pytest.mark.django_db
def test_user_patterns_run_outside_any_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    job = make_job()
    learner_of(job)
    seen: list[bool] = []
    parse = logs_service.parse_metric_line

    def spy(line: str, extractors: Any = ()) -> Any:
        seen.append(connection.in_atomic_block)
        return parse(line, extractors)

    monkeypatch.setattr(logs_service, "parse_metric_line", spy)
    # pytest-django's own test transaction is an atomic block; what matters is that ingest opened none.
    outer = connection.in_atomic_block
    append(job, ["step=1 loss=0.5", "plain"])
    assert seen == [outer, outer]


@pytest.mark.django_db(transaction=True)
def test_ingest_stores_while_a_state_change_holds_the_job_row() -> None:
    job = make_job()
    learner_of(job)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        # What every lifecycle transition takes (jobs/services/lifecycle.py `_locked`).
        with transaction.atomic():
            Job.objects.select_for_update(no_key=True).get(pk=job.pk)
            locked.set()
            release.wait(30)
        connection.close()

    def ingest() -> None:
        append(job, ["stored while the job row is locked"])
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        writer = threading.Thread(target=ingest)
        writer.start()
        writer.join(10)
        finished = not writer.is_alive()
    finally:
        release.set()
        holder.join(10)
    writer.join(10)
    assert finished, "the ingest waited for the job row"
    assert stored(job) == ["stored while the job row is locked"]


@pytest.mark.django_db
def test_the_policy_api_sets_and_clears_log_caps_with_field_errors() -> None:
    tenant = make_tenant()
    admin = Client()
    admin.force_login(make_user(is_staff=True, is_superuser=True))
    url = f"/api/v1/tenants/{tenant.slug}/policy/"
    assert admin.get(url).json()["log_max_lines"] is None
    bad = admin.patch(url, {"log_max_lines": 0, "log_max_bytes": "lots"}, content_type="application/json")
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"log_max_lines", "log_max_bytes"}
    good = admin.patch(
        url, {"log_max_lines_per_second": 50, "log_max_bytes": 10_000_000}, content_type="application/json"
    )
    assert good.status_code == 200 and good.json()["log_max_lines_per_second"] == 50
    policy = Policy.objects.get(tenant=tenant)
    assert (policy.log_max_lines_per_second, policy.log_max_bytes) == (50, 10_000_000)
    assert admin.patch(url, {"log_max_bytes": None}, content_type="application/json").status_code == 200
    assert Policy.objects.get(tenant=tenant).log_max_bytes is None
    owner = Client()
    owner.force_login(member(tenant, "owner"))
    assert owner.patch(url, {"log_max_lines": 5}, content_type="application/json").status_code == 403


@pytest.mark.django_db
def test_the_admin_console_policy_form_sets_log_caps_with_the_same_checks() -> None:
    from tenants.admin import PolicyForm

    tenant = make_tenant()
    base = {
        "host_path_prefixes": "[]", "image_registries": "[]", "datastore_hosts": "[]",
        "member_max_priority": "0", "owner_max_priority": "100", "pod_security": "restricted",
    }  # fmt: skip
    form = PolicyForm(data=base | {"log_max_lines": "0"}, instance=Policy(tenant=tenant))
    assert not form.is_valid() and "from 1 to" in form.errors["log_max_lines"][0]
    form = PolicyForm(
        data=base | {"log_max_lines": "2000", "log_max_bytes_per_second": "4096"},
        instance=Policy(tenant=tenant),
    )
    assert form.is_valid(), form.errors
    saved = form.save()
    assert (saved.log_max_lines, saved.log_max_bytes_per_second, saved.log_max_bytes) == (2000, 4096, None)


@pytest.mark.django_db
def test_a_line_longer_than_the_limit_is_stored_cut_with_a_visible_marker_and_the_next_is_whole() -> None:
    job = make_job()
    learner_of(job)
    append(job, ["z" * 50_000, "trainyard: uploaded 0 result file(s), 0 bytes"])
    first, second = stored(job)
    assert len(first) == 8192 and first.startswith("z" * 8000)
    assert first.endswith("[trainyard] line cut here: it was 50000 characters long, over the 8192 stored")
    assert second == "trainyard: uploaded 0 result file(s), 0 bytes"
