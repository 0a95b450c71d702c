"""A live socket through the real server (daphne, the Redis channel layer) left idle for a minute: nothing
closes it (not the server's pings, not the layer's blocking reads timing out), and it is still live after."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.sync.client import connect

from jobs.models import Learner
from jobs.services.logs import logs_append
from tests.factories import make_job, make_tenant, member

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
IDLE_SECONDS = 60


def append_line(job_id: str, text: str) -> None:
    try:
        logs_append(job_id=job_id, attempt=1, learner=0, records=[(None, text)], cursor=(None, 0))
    finally:
        connection.close()


def test_an_idle_live_socket_stays_open_a_minute_then_answers_and_gets_lines_live(server_url: str) -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="p")
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    headers = {"Cookie": cookie, "Origin": server_url}

    def frame(sock: Any) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(sock.recv(timeout=10))
        return answer

    with connect(f"ws{server_url.removeprefix('http')}/ws/", additional_headers=headers) as sock:
        sock.send(json.dumps({"action": "subscribe", "job": job.pk}))
        assert frame(sock)["type"] == "subscribed"
        # Nothing comes for a minute, and the socket stays open: a close would raise ConnectionClosed here.
        with pytest.raises(TimeoutError):
            sock.recv(timeout=IDLE_SECONDS)

        sock.send(json.dumps({"action": "dance"}))
        assert frame(sock) == {"type": "error", "error": "unknown action 'dance'"}
        # The job's reader survived the quiet minute too: a line stored now arrives live. Stored from a
        # thread of its own, as the watcher's log followers store lines: this thread may hold the browser
        # tests' Playwright event loop (package-scoped), under which publishing to the layer cannot run.
        store = threading.Thread(target=append_line, args=(job.pk, "after a quiet minute"))
        store.start()
        store.join(timeout=30)
        assert not store.is_alive()
        assert frame(sock) == {
            "type": "logs",
            "job": job.pk,
            "learner": 0,
            "lines": [[1, "after a quiet minute"]],
        }
