"""Probes and metrics: /healthz always, /readyz names the dependency that is down, /metrics series."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from jobs.services import job_submit
from kubesim.testing import KubeSim
from portal import telemetry
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_redis() -> Iterator[None]:
    telemetry._redis.cache_clear()
    yield
    telemetry._redis.cache_clear()


def test_healthz_answers_without_dependencies(client: Client) -> None:
    assert client.get("/healthz").content == b"ok"


def test_readyz_is_ready_when_everything_answers(
    client: Client, kubesim_cluster: KubeSim, settings: Any, fresh_redis: None
) -> None:
    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"ready": True, "checks": {"database": "ok", "redis": "ok", "cluster": "ok"}}


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


def test_metrics_expose_jobs_by_state_and_queue_per_tenant(client: Client, fresh_redis: None) -> None:
    tenant = make_tenant(slug="vision")
    job_submit(tenant=tenant, user=member(tenant), document={"name": "a", "image": "b", "command": ["c"]})
    telemetry.count("log_lines", 5)
    telemetry.gauge("admission_cycle_seconds", 0.25)
    text = client.get("/metrics").content.decode()
    assert 'trainyard_jobs{state="queued"} 1.0' in text
    assert 'trainyard_queue_length{tenant="vision"} 1.0' in text
    assert 'trainyard_queue_oldest_wait_seconds{tenant="vision"}' in text
    assert "trainyard_log_lines_total" in text
    assert "trainyard_admission_cycle_seconds 0.25" in text
