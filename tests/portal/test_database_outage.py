"""The API while PostgreSQL cannot be reached: 503 in the API's error shape with Retry-After, never Django's
HTML 500 page, and /readyz naming the database.

In process (Django's test client), the request's database connection is pointed at a local port where
nothing listens, then back. Through a real server process (daphne), the outage is a real one: the server
runs on a PostgreSQL cluster of the test's own (tests/own_postgres.py), which the test stops and starts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.db import connection
from django.test import Client

from jobs.artifacts.tokens import HEADER, mint_token
from tenants.tokens import token_create
from tests.conftest import _free_port
from tests.factories import make_job, make_tenant, member
from tests.own_postgres import OwnPostgres
from tests.web_process import web_process

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def database_down() -> Iterator[None]:
    """Within the block, this thread's database connection goes to a port nothing listens on."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_free_port()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def _is_database_503(response: Any) -> None:
    assert response.status_code == 503, response.content
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Retry-After"] == "5"
    body = response.json()
    assert body["detail"] == "the database cannot answer this request now; try again shortly"
    assert body["errors"] == {"": [body["detail"]]}


def test_a_signed_in_api_request_answers_503_in_the_error_shape_while_the_database_is_down() -> None:
    client = Client(raise_request_exception=False)
    client.force_login(member(make_tenant()))
    with database_down():
        _is_database_503(client.get("/api/v1/tenants/"))


def test_a_token_request_answers_503_while_the_database_is_down() -> None:
    tenant = make_tenant()
    _, secret = token_create(user=member(tenant), name="ci")
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/jobs/").status_code == 200
    with database_down():
        _is_database_503(client.get("/api/v1/jobs/"))
        _is_database_503(
            client.post("/api/v1/jobs/", {"tenant": tenant.slug, "spec": {}}, content_type="application/json")
        )
    assert client.get("/api/v1/jobs/").status_code == 200, "the API answers again once the database does"


def test_a_learner_pod_endpoint_answers_503_in_the_error_shape_while_the_database_is_down() -> None:
    job = make_job()
    token = mint_token(job_id=job.pk, attempt=1)
    client = Client(raise_request_exception=False, headers={HEADER: token})
    with database_down():
        _is_database_503(client.get(f"/api/v1/artifacts/{job.pk}/1/code"))


@pytest.mark.slow
def test_a_server_answers_503_and_is_not_ready_while_its_postgresql_is_stopped_then_answers_again(
    own_postgres: OwnPostgres, own_database: str, tmp_path: Any
) -> None:
    _, secret = token_create(user=member(make_tenant()), name="ci")
    env = {"DATABASE_URL": own_postgres.url(own_database), "KUBECONFIG": ""}
    with (
        web_process(own_database, env, tmp_path) as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=30) as client,
    ):
        assert client.get("/api/v1/jobs/").status_code == 200
        assert client.get("/readyz").json()["checks"]["database"] == "ok"
        with own_postgres.down():
            _is_database_503(client.get("/api/v1/jobs/"))
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert "OperationalError" in ready.json()["checks"]["database"]
            assert client.get("/healthz").text == "ok"
        assert client.get("/api/v1/jobs/").status_code == 200, "the API answers again once the database does"
        assert client.get("/readyz").json()["checks"]["database"] == "ok"
