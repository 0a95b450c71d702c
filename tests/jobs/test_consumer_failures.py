"""The live socket when its channel layer or PostgreSQL fails under it: the socket closes with the platform's
4503, a code the WebSocket protocol lets an application send (daphne refuses 1011) and clients reconnect
after, never left open with nothing feeding it; and no task it started outlives it.

The consumer runs in this process under a WebsocketCommunicator, on the test's own Django connection, so
the PostgreSQL outage is the one tests/pg_outage.py makes on the shared test server (new connections
refused, open sessions ended); the tests that run a server process stop a cluster of their own instead
(tests/own_postgres.py: tests/e2e/test_live_outage.py, tests/portal/test_database_outage.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings

from jobs.consumers import CLOSE_STREAM_FAILED
from jobs.models import Job
from jobs.services import job_submit
from jobs.streams import job_group
from tests.factories import make_tenant, member
from tests.jobs.test_consumers import connect, frames_until, run
from tests.pg_outage import postgres_down

pytestmark = pytest.mark.django_db(transaction=True)
LOST = "Error while reading from 127.0.0.1:6379 : (104, 'Connection reset by peer')"


class LayerThatBreaks(InMemoryChannelLayer):
    """An in-memory layer whose receive fails, as the Redis layer's does when its connection is lost, once
    `broken` names the kind of channel: "job" (a job subscription's own channel) or "socket" (the socket's
    channel, which tenant groups reach)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.broken = ""
        self.job_channels: set[str] = set()
        self.socket_channels: set[str] = set()

    async def group_add(self, group: str, channel: str) -> None:
        if group.startswith("job."):
            self.job_channels.add(channel)
        await super().group_add(group, channel)

    async def receive(self, channel: str) -> dict[str, Any]:
        if channel not in self.job_channels:
            self.socket_channels.add(channel)
        message: dict[str, Any] = await super().receive(channel)
        kind = "job" if channel in self.job_channels else "socket"
        if self.broken == kind:
            raise ConnectionError(LOST)
        return message


@pytest.fixture
def layer() -> Iterator[None]:
    with override_settings(
        CHANNEL_LAYERS={"default": {"BACKEND": "tests.jobs.test_consumer_failures.LayerThatBreaks"}}
    ):
        yield


@pytest.fixture
def subscriber(layer: None) -> tuple[User, Job]:
    tenant = make_tenant()
    user = member(tenant)
    return user, job_submit(tenant=tenant, user=user, document={"name": "a", "image": "b", "command": ["c"]})


def live_tasks() -> list[asyncio.Task[Any]]:
    """The job feeds' readers and flushers, and the sockets' senders, still running in this loop."""
    feeders = ("JobFeed._read", "JobFeed._refresh", "JobFeed._flush_soon", "LiveConsumer._send_outbox")
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") in feeders]


def test_a_job_streams_layer_failing_closes_the_socket_for_the_browser_to_reconnect(
    subscriber: tuple[User, Job],
) -> None:
    user, job = subscriber

    async def scenario() -> None:
        layer = get_channel_layer()
        assert isinstance(layer, LayerThatBreaks)
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(comm, lambda frames: any(f["type"] == "subscribed" for f in frames))
        assert live_tasks(), "the job's reader runs"

        layer.broken = "job"
        payload = {"kind": "logs", "learner": 0, "lines": [[1, "x"]], "metrics": []}
        await layer.group_send(job_group(job.pk), {"type": "job.message", "payload": payload})
        # Closed, not left open with nothing feeding it; 4401 would tell the browser not to come back.
        closed = await comm.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": CLOSE_STREAM_FAILED} and closed["code"] != 4401
        await comm.send_input({"type": "websocket.disconnect", "code": CLOSE_STREAM_FAILED})
        await comm.wait(timeout=5)  # the consumer ended (it would raise TimeoutError if it hung)
        await asyncio.sleep(0)
        assert not live_tasks()

    run(scenario)


def test_the_sockets_own_channel_failing_leaves_no_reader_running(subscriber: tuple[User, Job]) -> None:
    user, job = subscriber

    async def scenario() -> None:
        layer = get_channel_layer()
        assert isinstance(layer, LayerThatBreaks)
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(comm, lambda frames: any(f["type"] == "subscribed" for f in frames))
        [own] = layer.socket_channels
        assert live_tasks()

        layer.broken = "socket"
        await layer.send(own, {"type": "job.message", "payload": {}})
        # The consumer closes the socket itself with 4503 (not the server's 1011); its job reader goes with it.
        assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4503}
        await comm.wait(timeout=5)
        await asyncio.sleep(0)
        assert not live_tasks()

    run(scenario)


def test_the_close_code_is_one_an_application_may_send() -> None:
    # RFC 6455 7.4: 1011 is sent by the endpoint itself; daphne's autobahn accepts only 1000 and 3000-4999.
    assert 4000 <= CLOSE_STREAM_FAILED <= 4999 and CLOSE_STREAM_FAILED != 4401


@override_settings(LIVE_AUTH_RECHECK_SECONDS=0.2)
def test_postgresql_going_away_under_an_open_socket_closes_it_with_4503(subscriber: tuple[User, Job]) -> None:
    user, job = subscriber

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(comm, lambda frames: any(f["type"] == "subscribed" for f in frames))
        with postgres_down(end_sessions=True):  # the periodic credentials check cannot reach the database
            closed = await comm.receive_output(timeout=10)
        assert closed == {"type": "websocket.close", "code": CLOSE_STREAM_FAILED}
        await comm.send_input({"type": "websocket.disconnect", "code": CLOSE_STREAM_FAILED})
        await comm.wait(timeout=5)
        await asyncio.sleep(0)
        assert not live_tasks()

    run(scenario)
    connection.close()  # ended with the outage: the next query opens a fresh one


def test_a_subscribe_while_postgresql_is_down_closes_the_socket_with_4503(
    subscriber: tuple[User, Job],
) -> None:
    user, job = subscriber

    async def scenario() -> None:
        comm = await connect(user)
        with postgres_down():
            await comm.send_json_to({"action": "subscribe", "job": job.pk})
            closed = await comm.receive_output(timeout=10)
        assert closed == {"type": "websocket.close", "code": CLOSE_STREAM_FAILED}
        await comm.wait(timeout=5)  # the consumer ended after closing; nothing of it is left running
        await asyncio.sleep(0)
        assert not live_tasks()
        # PostgreSQL is back: a new socket subscribes as usual.
        again = await connect(user)
        await again.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(again, lambda frames: any(f["type"] == "subscribed" for f in frames))
        await again.disconnect()

    run(scenario)
