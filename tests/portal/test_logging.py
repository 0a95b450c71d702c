"""Structured logs: JSON lines that carry the request id (web) and the job id (web routes, Celery tasks)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from celery import shared_task
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client
from django.urls import path

from portal.logging import ContextFilter, JsonFormatter, PlainFormatter, job_context


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Everything logged at INFO and up, formatted as production formats it (one JSON object a line)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(old_level)


def entries(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_a_record_is_one_json_object_with_its_context_ids_and_extra_fields(json_log: io.StringIO) -> None:
    log = logging.getLogger("trainyard.test")
    with job_context("j-42"):
        log.info("started %s", "now", extra={"tenant": "vision"})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("it failed")
    first, second = entries(json_log)
    assert (
        first["message"] == "started now" and first["level"] == "INFO" and first["logger"] == "trainyard.test"
    )
    assert first["job_id"] == "j-42" and first["tenant"] == "vision" and first["ts"].endswith("+00:00")
    assert "request_id" not in first, "ids that are not set are left out"
    assert "job_id" not in second, "the job context ended with its block"
    assert "ValueError: bad" in second["exc_info"]


def test_the_plain_format_shows_the_ids_too() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    with job_context("j-7"):
        ContextFilter().filter(record)
    assert PlainFormatter().format(record).endswith("x [job_id=j-7] hello")


def test_each_request_gets_an_id_in_its_logs_and_response_with_the_job_id_of_its_route(
    client: Client, json_log: io.StringIO
) -> None:
    response = client.get("/api/v1/jobs/some-job/")  # anonymous: refused before any query
    assert response.status_code in (401, 403)
    request_id = response["X-Request-ID"]
    assert len(request_id) == 32
    (refused,) = [e for e in entries(json_log) if e["logger"] == "django.request"]
    assert refused["request_id"] == request_id
    assert refused["job_id"] == "some-job"
    assert refused["path"] == "/api/v1/jobs/some-job/" and refused["status_code"] == response.status_code
    assert client.get("/healthz")["X-Request-ID"] != request_id


def test_the_proxys_request_id_is_kept_and_a_malformed_one_replaced(client: Client) -> None:
    nginx_id = "0123456789abcdef0123456789abcdef"
    assert client.get("/healthz", HTTP_X_REQUEST_ID=nginx_id)["X-Request-ID"] == nginx_id
    forged = client.get("/healthz", HTTP_X_REQUEST_ID="evil\nid with spaces")["X-Request-ID"]
    assert forged != "evil\nid with spaces" and len(forged) == 32


def test_the_async_stack_carries_the_ids_too(json_log: io.StringIO) -> None:
    async def scenario() -> Any:
        return await AsyncClient().get(
            "/api/v1/jobs/async-job/", headers={"X-Request-ID": "req-from-ingress-1"}
        )

    response = async_to_sync(scenario)()
    assert response.status_code in (401, 403) and response["X-Request-ID"] == "req-from-ingress-1"
    (refused,) = [e for e in entries(json_log) if e["logger"] == "django.request"]
    assert refused["request_id"] == "req-from-ingress-1" and refused["job_id"] == "async-job"


def _logging_view(request: HttpRequest, job_id: str) -> HttpResponse:
    logging.getLogger("tests.view").info("inside the view")
    return HttpResponse("ok")


urlpatterns = [path("jobs/<str:job_id>/echo/", _logging_view)]


@pytest.mark.urls(__name__)
def test_records_made_inside_a_view_carry_the_request_and_job_ids(
    client: Client, json_log: io.StringIO
) -> None:
    client.get("/jobs/j-5/echo/", HTTP_X_REQUEST_ID="req-inside-sync-1")

    async def scenario() -> Any:
        return await AsyncClient().get("/jobs/j-6/echo/", headers={"X-Request-ID": "req-inside-async-1"})

    async_to_sync(scenario)()
    inside = [(e["request_id"], e["job_id"]) for e in entries(json_log) if e["logger"] == "tests.view"]
    assert inside == [("req-inside-sync-1", "j-5"), ("req-inside-async-1", "j-6")]


@shared_task(name="tests.portal.logs_for_a_job")
def logs_for_a_job(job_id: str, attempt: int) -> None:
    logging.getLogger("jobs.tasks").info("working on attempt %s", attempt)


def test_a_celery_task_that_takes_a_job_id_logs_with_it_and_its_task_id(json_log: io.StringIO) -> None:
    logs_for_a_job.apply(args=("j-99", 2), task_id="task-1")
    logs_for_a_job.apply(kwargs={"job_id": "j-100", "attempt": 1}, task_id="task-2")
    logging.getLogger("after").info("outside any task")
    first, second, outside = [e for e in entries(json_log) if e["logger"] in ("jobs.tasks", "after")]
    assert (first["job_id"], first["task_id"]) == ("j-99", "task-1")
    assert (second["job_id"], second["task_id"]) == ("j-100", "task-2")
    assert "job_id" not in outside and "task_id" not in outside


def test_the_settings_log_json_with_the_context_filter(settings: Any) -> None:
    """base.py wires both formats and the filter; LOG_FORMAT picks one (production: json)."""
    from portal.settings import base

    handler = base.LOGGING["handlers"]["console"]
    assert handler["filters"] == ["context"]
    assert base.LOGGING["formatters"]["json"] == {"()": "portal.logging.JsonFormatter"}
    assert base.LOGGING["filters"]["context"] == {"()": "portal.logging.ContextFilter"}
    assert "portal.middleware.RequestIdMiddleware" in base.MIDDLEWARE
    assert base.CELERY_WORKER_HIJACK_ROOT_LOGGER is False
    assert "portal.logging" in base.CELERY_IMPORTS
