"""The task outbox (jobs/outbox.py) against a Redis of the test's own that it stops and starts again: with
Redis down a submit and a cancel answer at once, their tasks stored in PostgreSQL; once Redis is back the
drain sends them and a real worker runs them."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import signals
from celery.contrib.testing.worker import start_worker
from django.test import Client
from kombu import pools

from common import telemetry
from jobs import outbox
from jobs.core.states import JobStatus
from jobs.models import OutboxTask
from jobs.services import job_submit
from portal.celery import app
from portal.settings.base import channel_layer_host
from tests.conftest import _free_port
from tests.factories import SPEC, make_job, make_tenant, member

pytestmark = pytest.mark.django_db(transaction=True)


class OwnRedis:
    """A redis-server on a free port, with no persistence, that a test may stop and start again."""

    def __init__(self, directory: Path) -> None:
        self.port = _free_port()
        self.directory = directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        self.process = subprocess.Popen(command, cwd=self.directory, stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def queued(self, queue: str = "celery") -> int:
        return int(redis.Redis(port=self.port).llen(queue))


def _point_celery_at(url: str) -> None:
    app.conf.update(broker_url=url)
    # The connection and producer pools were made for the previous broker: closed and dropped, as after
    # a fork.
    pools.reset()
    app._after_fork()  # type: ignore[attr-defined]


@pytest.fixture
def own_redis(tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnRedis]:
    """Every Redis client of the process (broker, channel layer, telemetry) on a Redis of the test's own."""
    server = OwnRedis(tmp_path)
    server.start()
    before = app.conf.broker_url
    settings.REDIS_URL = settings.CELERY_BROKER_URL = server.url
    layer = settings.CHANNEL_LAYERS["default"]
    config = layer["CONFIG"] | {"hosts": [channel_layer_host(server.url)]}
    settings.CHANNEL_LAYERS = {"default": layer | {"CONFIG": config}}
    settings.KUBECONFIG = str(tmp_path / "no-cluster")  # the tasks run here find no cluster, at once
    monkeypatch.setattr(outbox, "_broker_down_until", 0.0)
    telemetry._redis.cache_clear()
    _point_celery_at(server.url)
    try:
        yield server
    finally:
        _point_celery_at(before)
        telemetry._redis.cache_clear()
        server.stop()


def test_with_redis_up_a_task_is_sent_at_commit_and_leaves_no_row(own_redis: OwnRedis) -> None:
    tenant = make_tenant()
    job_submit(tenant=tenant, user=member(tenant), document=dict(SPEC))  # queues a scheduler cycle
    assert OutboxTask.objects.count() == 0
    assert own_redis.queued() == 1


def test_with_redis_down_submit_and_cancel_answer_at_once_and_their_tasks_run_when_it_returns(
    own_redis: OwnRedis,
) -> None:
    tenant = make_tenant()
    user = member(tenant, "owner")
    running = make_job(tenant, user, status=JobStatus.RUNNING, attempt=1)
    client = Client()
    client.force_login(user)
    own_redis.stop()

    started = time.monotonic()
    submitted = client.post(
        "/api/v1/jobs/", {"tenant": tenant.slug, "spec": SPEC}, content_type="application/json"
    )
    submit_seconds = time.monotonic() - started
    started = time.monotonic()
    cancelled = client.post(f"/api/v1/jobs/{running.pk}/cancel/")
    cancel_seconds = time.monotonic() - started

    assert submitted.status_code == 201, submitted.content
    assert cancelled.status_code == 200 and cancelled.json()["status"] == JobStatus.CANCELLING
    # Without the outbox each waited on the result backend's 20 retries of 1 s.
    assert submit_seconds < 3 and cancel_seconds < 3, (submit_seconds, cancel_seconds)
    waiting = {(row.task, tuple(row.args)) for row in OutboxTask.objects.all()}
    assert ("jobs.tasks.schedule", ()) in waiting
    assert ("jobs.tasks.teardown", (running.pk, 1)) in waiting

    own_redis.start()
    ran: list[tuple[str, tuple[Any, ...]]] = []
    seen = threading.Condition()

    def record(sender: Any = None, args: Any = (), **_: Any) -> None:
        with seen:
            ran.append((sender.name, tuple(args or ())))
            seen.notify_all()

    signals.task_prerun.connect(record, weak=False)
    try:
        with start_worker(
            app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=10
        ) as w:
            assert outbox.outbox_drain() == len(waiting)
            assert OutboxTask.objects.count() == 0
            with seen:
                assert seen.wait_for(lambda: waiting <= set(ran), timeout=30), (waiting, ran)
        w.pool.executor.shutdown(wait=True, cancel_futures=True)
    finally:
        signals.task_prerun.disconnect(record)
        app.control.purge()
