"""Probes and metrics: /healthz always, /readyz names the dependency that is down, /metrics series."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from common import telemetry
from jobs import cluster
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_redis() -> Iterator[None]:
    telemetry._redis.cache_clear()
    yield
    telemetry._redis.cache_clear()


def test_healthz_answers_without_dependencies(client: Client) -> None:
    assert client.get("/healthz").content == b"ok"


@pytest.fixture
def no_pulses(fresh_redis: None) -> Iterator[None]:
    telemetry._redis().delete(telemetry.PULSES_KEY)
    yield
    telemetry._redis().delete(telemetry.PULSES_KEY)


def _wait_ready(client: Client, check: str, value: Callable[[str], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        body: dict[str, Any] = client.get("/readyz").json()
        if value(body["checks"][check]):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True)
def test_readyz_is_ready_while_the_watcher_and_the_scheduler_pulse_and_names_a_watcher_that_stopped(
    client: Client, kubesim_cluster: KubeSim, settings: Any, no_pulses: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs import watcher as watcher_module
    from jobs.tasks import schedule

    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    assert client.get("/readyz").json()["checks"]["watcher"] == "no heartbeat yet"
    monkeypatch.setattr(watcher_module, "PULSE_SECONDS", 0.2)
    watcher = watcher_module.Watcher(cluster.cluster(), follow_logs=False)
    thread = threading.Thread(target=watcher.run, name="watcher")
    thread.start()
    try:
        schedule()  # one scheduler cycle, as a worker runs it when beat sends it
        body = _wait_ready(client, "watcher", lambda value: value == "ok")
        response = client.get("/readyz")
        assert response.status_code == 200, response.content
        assert response.json() == {
            "ready": True,
            "checks": {"database": "ok", "redis": "ok", "cluster": "ok", "watcher": "ok", "scheduler": "ok"},
            "leaders": {"watcher": None, "beat": None},  # this watcher runs in-process, unelected
        }, body
    finally:
        watcher.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    settings.READY_WATCHER_STALE_SECONDS = 1
    body = _wait_ready(client, "watcher", lambda value: value.startswith("no heartbeat for"))
    assert body["ready"] is False and body["checks"]["scheduler"] == "ok"
    assert client.get("/readyz").status_code == 503


def test_readyz_names_a_scheduler_that_never_ran(client: Client, settings: Any, no_pulses: None) -> None:
    telemetry.pulse("watcher")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["scheduler"] == "no heartbeat yet"
    assert response.json()["checks"]["watcher"] == "ok"
    settings.READY_SCHEDULER_STALE_SECONDS = 0  # left out of /readyz
    assert "scheduler" not in client.get("/readyz").json()["checks"]


def test_readyz_names_an_unreachable_cluster(
    client: Client, tmp_path: Any, settings: Any, fresh_redis: None
) -> None:
    dead = tmp_path / "kubeconfig"
    dead.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    settings.KUBECONFIG = str(dead)
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"] == "ok" and checks["cluster"] != "ok"


def test_readyz_names_a_redis_that_is_down(
    client: Client, kubesim_cluster: KubeSim, settings: Any, fresh_redis: None
) -> None:
    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["redis"] != "ok"


@pytest.fixture
def metrics_token(settings: Any) -> Client:
    """A scraper holding METRICS_TOKEN."""
    settings.METRICS_TOKEN = "scrape-secret"
    return Client(HTTP_AUTHORIZATION="Bearer scrape-secret")


def test_metrics_expose_jobs_by_state_and_queue_per_tenant(metrics_token: Client, fresh_redis: None) -> None:
    tenant = make_tenant(slug="vision")
    job_submit(tenant=tenant, user=member(tenant), document={"name": "a", "image": "b", "command": ["c"]})
    telemetry.count("log_lines", 5)
    telemetry.gauge("admission_cycle_seconds", 0.25)
    text = metrics_token.get("/metrics").content.decode()
    assert 'trainyard_jobs{state="queued"} 1.0' in text
    assert 'trainyard_queue_length{tenant="vision"} 1.0' in text
    assert 'trainyard_queue_oldest_wait_seconds{tenant="vision"}' in text
    assert "trainyard_log_lines_total" in text
    assert "trainyard_admission_cycle_seconds 0.25" in text


def test_metrics_with_a_token_set_refuse_scrapers_without_it(metrics_token: Client) -> None:
    for header in (None, "Bearer wrong", "scrape-secret"):
        response = Client(headers={"Authorization": header} if header else None).get("/metrics")
        assert response.status_code == 401 and b"METRICS_TOKEN" in response.content
    assert metrics_token.get("/metrics").status_code == 200


def test_anonymous_metrics_name_no_tenant(client: Client, fresh_redis: None) -> None:
    tenant = make_tenant(slug="secret-project")
    job_submit(tenant=tenant, user=member(tenant), document={"name": "a", "image": "b", "command": ["c"]})
    text = client.get("/metrics").content.decode()
    assert "secret-project" not in text and "tenant=" not in text
    assert "trainyard_queue_length 1.0" in text
    assert "trainyard_queue_oldest_wait_seconds " in text


# -- each dependency down ----------------------------------------------------------------------------


@pytest.fixture
def dead_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """/readyz's database check pointed at a PostgreSQL port where nothing listens (a real refusal)."""
    from django.db import connection
    from django.db.backends.postgresql.base import DatabaseWrapper

    from portal import health

    dead = DatabaseWrapper({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": "9"}, alias="dead")
    monkeypatch.setattr(health, "connection", dead)
    yield
    dead.close()


def test_readyz_names_a_database_that_is_down(
    client: Client, kubesim_cluster: KubeSim, settings: Any, fresh_redis: None, dead_database: None
) -> None:
    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"] != "ok" and "OperationalError" in checks["database"]
    assert checks["redis"] == "ok" and checks["cluster"] == "ok"


def test_healthz_answers_with_every_dependency_down(
    client: Client, tmp_path: Any, settings: Any, fresh_redis: None, dead_database: None
) -> None:
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    response = client.get("/healthz")
    assert response.status_code == 200 and response.content == b"ok"
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert all(value != "ok" for value in ready.json()["checks"].values())


# -- /metrics: every named series, recorded where it happens -------------------------------------------

NAMED_SERIES = [
    "trainyard_jobs",  # jobs by state
    "trainyard_queue_length",  # per tenant
    "trainyard_queue_oldest_wait_seconds",  # per tenant
    "trainyard_admission_cycle_seconds",
    "trainyard_pod_event_lag_seconds",
    "trainyard_log_lines_total",  # rate() gives lines per second
    "trainyard_websocket_clients",
    "trainyard_task_failures_total",
]


@pytest.fixture
def clean_telemetry(fresh_redis: None) -> Iterator[None]:
    telemetry._redis().delete(telemetry.KEY)
    yield
    telemetry._redis().delete(telemetry.KEY)


def series(text: str) -> dict[str, float]:
    """`name{labels}` → value of every sample in an exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def test_metrics_expose_every_named_series_before_anything_was_recorded(
    metrics_token: Client, clean_telemetry: None
) -> None:
    make_tenant(slug="idle")  # queue series are per tenant: an idle one reports 0
    response = metrics_token.get("/metrics")
    assert response.status_code == 200
    names = {key.split("{")[0] for key in series(response.content.decode())}
    missing = [name for name in NAMED_SERIES if name not in names]
    assert not missing, f"/metrics lacks {missing}"
    assert 'trainyard_queue_length{tenant="idle"} 0.0' in response.content.decode()


def test_the_scheduler_task_records_the_admission_cycle_duration(
    kubesim_cluster: KubeSim, settings: Any, clean_telemetry: None
) -> None:
    from jobs.tasks import schedule

    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    tenant = make_tenant()
    job_submit(tenant=tenant, user=member(tenant), document={"name": "a", "image": "b", "command": ["c"]})
    assert schedule()["ran"] is True
    assert telemetry.snapshot().get("gauge:admission_cycle_seconds", 0) > 0


def test_stored_log_lines_are_counted(clean_telemetry: None) -> None:
    from jobs.models import Learner
    from jobs.services.logs import logs_append

    tenant = make_tenant()
    job = job_submit(
        tenant=tenant, user=member(tenant), document={"name": "a", "image": "b", "command": ["c"]}
    )
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="p")
    logs_append(job_id=job.pk, attempt=1, learner=0, records=[(None, "one"), (None, "two")], cursor=(None, 0))
    logs_append(job_id=job.pk, attempt=1, learner=0, records=[(None, "three")], cursor=(None, 0))
    assert telemetry.snapshot()["counter:log_lines"] == 3


def test_the_watch_loop_records_how_late_a_pod_event_arrives(
    kubesim_cluster: KubeSim, clean_telemetry: None
) -> None:
    from datetime import UTC, datetime, timedelta

    from clusterio.client import Cluster
    from jobs.watcher import Watcher

    changed = (datetime.now(UTC) - timedelta(seconds=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    earlier = (datetime.now(UTC) - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = {
        "metadata": {"name": "not-ours", "namespace": "x", "creationTimestamp": earlier},
        "status": {"conditions": [{"type": "Ready", "lastTransitionTime": changed}]},
    }
    Watcher(Cluster(kubeconfig=str(kubesim_cluster.kubeconfig_path))).on_event("MODIFIED", pod)
    lag = telemetry.snapshot()["gauge:pod_event_lag_seconds"]
    assert 6 <= lag <= 30


def test_pod_event_lag_reads_the_newest_change_the_pod_reports() -> None:
    pod = {
        "metadata": {"creationTimestamp": "2030-01-01T00:00:00Z"},
        "status": {
            "startTime": "2030-01-01T00:00:01Z",
            "conditions": [{"lastTransitionTime": "2030-01-01T00:00:02Z"}],
            "containerStatuses": [
                {"state": {"terminated": {"startedAt": "x", "finishedAt": "2030-01-01T00:00:05Z"}}}
            ],
        },
    }
    finished = datetime_ts("2030-01-01T00:00:05Z")
    assert telemetry.pod_event_lag(pod, finished + 1.5) == 1.5
    assert telemetry.pod_event_lag(pod, finished - 10) == 0.0, "a clock behind the API's is no negative lag"
    assert telemetry.pod_event_lag({"metadata": {}}, finished) is None


def datetime_ts(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value).timestamp()


def test_a_failing_celery_task_is_counted(clean_telemetry: None) -> None:
    from celery import shared_task

    @shared_task(name="tests.portal.fails")
    def fails() -> None:
        raise RuntimeError("boom")

    fails.apply()
    assert telemetry.snapshot()["counter:task_failures"] == 1


@pytest.mark.django_db(transaction=True)
def test_open_websockets_are_counted_by_the_web_process(client: Client) -> None:
    from asgiref.sync import async_to_sync
    from channels.testing import WebsocketCommunicator
    from django.conf import settings as django_settings

    from portal.asgi import application

    tenant = make_tenant()
    client.force_login(member(tenant))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    headers = [
        (b"origin", b"http://testserver"),
        (b"host", b"testserver"),
        (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode()),
    ]
    before = telemetry.WEBSOCKET_CLIENTS._value.get()

    async def scenario() -> tuple[float, float]:
        first = WebsocketCommunicator(application, "/ws/", headers=headers)
        second = WebsocketCommunicator(application, "/ws/", headers=headers)
        assert (await first.connect())[0] and (await second.connect())[0]
        both = telemetry.WEBSOCKET_CLIENTS._value.get()
        await first.disconnect()
        one = telemetry.WEBSOCKET_CLIENTS._value.get()
        await second.disconnect()
        return both, one

    both, one = async_to_sync(scenario)()
    assert (both, one) == (before + 2, before + 1)
    assert telemetry.WEBSOCKET_CLIENTS._value.get() == before
    text = Client().get("/metrics").content.decode()
    assert f"trainyard_websocket_clients {before:.1f}" in text
