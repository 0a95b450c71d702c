"""Telemetry: PodMetrics parsed into millicores and MiB, one row per learner per look with the learner's
speed from its metric lines, the job page and `GET /api/v1/jobs/{id}/telemetry/` (404 to other tenants)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from clusterio.telemetry import PodUsage, pod_usage
from jobs import cluster
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent, MetricSample, TelemetrySample
from jobs.telemetry import telemetry_record, telemetry_record_running
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.django_db


def test_pod_usage_sums_containers_in_millicores_and_mib() -> None:
    metrics = {
        "containers": [
            {"name": "learner", "usage": {"cpu": "950000000n", "memory": "204800Ki"}},
            {"name": "side", "usage": {"cpu": "50m", "memory": "1Mi"}},
        ]
    }
    assert pod_usage(metrics) == PodUsage(cpu_millis=1000, memory_mib=201, gpu_util=None)


def test_pod_usage_reads_a_gpu_percentage_where_exposed() -> None:
    usage = pod_usage({"containers": [{"usage": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "87"}}]})
    assert usage is not None and usage.gpu_util == pytest.approx(0.87)


@pytest.mark.parametrize("metrics", [None, {}, {"containers": []}])
def test_no_sample_is_none(metrics: Any) -> None:
    assert pod_usage(metrics) is None


def running_job(**fields: Any) -> Job:
    job = make_job(status=JobStatus.RUNNING, attempt=1, cpu_millis=1000, memory_mib=1024, **fields)
    return job


def test_one_row_per_learner_with_speed_from_metric_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    job = running_job(learners=2)
    monkeypatch.setattr(
        cluster, "learner_usage", lambda j: {0: PodUsage(980, 300), 1: PodUsage(990, 310, 0.5)}
    )
    now = timezone.now()
    for learner in (0, 1):
        for i, step in enumerate((10, 20, 30)):
            ts = now - timedelta(seconds=6 - 2 * i)
            MetricSample.objects.create(
                job=job, learner=learner, attempt=1, name="samples_per_sec", value=100.0 + i, step=step, ts=ts,
                log_seq=i,
            )  # fmt: skip
    assert telemetry_record(job_id=job.pk, now=now) == 2
    rows = list(TelemetrySample.objects.filter(job=job).order_by("learner"))
    assert [r.cpu_millis_used for r in rows] == [980, 990]
    assert rows[0].cpu_millis_limit == 1000 and rows[0].memory_mib_limit == 1024
    assert rows[0].samples_per_sec == pytest.approx(101.0)
    assert rows[0].steps_per_sec == pytest.approx(20 / 4)  # steps 10 -> 30 over 4 s
    assert rows[1].gpu_util == pytest.approx(0.5)
    assert rows[0].ts == rows[1].ts  # one look


def test_a_learner_without_metrics_sample_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    job = running_job()
    monkeypatch.setattr(cluster, "learner_usage", lambda j: {0: None})
    assert telemetry_record(job_id=job.pk) == 0


def test_only_running_jobs_are_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    running = running_job()
    make_job(status=JobStatus.QUEUED)
    seen: list[str] = []

    def usage(job: Job) -> dict[int, PodUsage | None]:
        seen.append(job.pk)
        return {0: PodUsage(10, 10)}

    monkeypatch.setattr(cluster, "learner_usage", usage)
    counts = telemetry_record_running()
    assert seen == [running.pk]
    assert counts == {"jobs": 1, "samples": 1, "errors": 0}


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_api_serves_telemetry_and_decisions_to_the_tenant_only() -> None:
    tenant, other = make_tenant(), make_tenant()
    job = running_job(tenant=tenant)
    TelemetrySample.objects.create(
        job=job, attempt=1, learner=0, cpu_millis_used=900, cpu_millis_limit=1000, memory_mib_used=200,
        memory_mib_limit=1024, samples_per_sec=1234.5,
    )  # fmt: skip
    JobEvent.objects.create(job=job, kind="tuning", reason="Scaled", data={"action": "scale"})
    response = api(member(tenant)).get(f"/api/v1/jobs/{job.pk}/telemetry/")
    assert response.status_code == 200
    body = response.json()
    assert body["samples"][0]["cpu_millis_used"] == 900
    assert body["samples"][0]["samples_per_sec"] == 1234.5
    assert body["decisions"][0]["reason"] == "Scaled"
    assert api(member(other)).get(f"/api/v1/jobs/{job.pk}/telemetry/").status_code == 404


def test_job_page_shows_telemetry_and_tuning_evidence() -> None:
    tenant = make_tenant()
    job = running_job(tenant=tenant)
    TelemetrySample.objects.create(
        job=job, attempt=1, learner=0, cpu_millis_used=987, cpu_millis_limit=1000, memory_mib_used=200,
        memory_mib_limit=1024, samples_per_sec=4321.0,
    )  # fmt: skip
    JobEvent.objects.create(
        job=job, kind="tuning", reason="Scaled", message="cpu_bound: CPU 1000m -> 2000m per learner",
        data={"action": "scale", "from": {"cpu_millis": 1000, "learners": 1},
              "to": {"cpu_millis": 2000, "learners": 1},
              "evidence": {"diagnosis": "cpu_bound", "stable": True, "cpu_util": 0.987, "speed_mean": 4321.0}},
    )  # fmt: skip
    page = api(member(tenant)).get(f"/jobs/{job.pk}/").content.decode()
    assert "987m / 1000m" in page
    assert "1 x 1000m → 1 x 2000m" in page
    assert "cpu_bound (stable)" in page
    assert "CPU 1000m -&gt; 2000m per learner" in page


def test_job_page_says_so_when_the_tuner_has_not_decided_anything() -> None:
    tenant = make_tenant()
    job = running_job(tenant=tenant)
    JobEvent.objects.create(job=job, kind="pod", reason="PodsCreated", message="created 1 pod(s)")
    page = api(member(tenant)).get(f"/jobs/{job.pk}/").content.decode()
    assert "No tuning decisions yet." in page, "other events must not hide the empty-table message"
