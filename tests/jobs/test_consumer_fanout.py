"""Fan-out of one job to many sockets of a process (jobs.livefeed): the job's group holds one channel of the
process whatever the number of viewers, each published batch is read from Redis once, every viewer gets every
line once; and a viewer whose writes do not keep up is dropped to a `gap` ("slow": catch up from the REST
API) instead of falling behind, while the others go on unaffected."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from jobs import consumers, livefeed
from jobs.livefeed import feeds
from jobs.models import Job
from jobs.streams import job_group
from portal.asgi import application
from tenants.models import Tenant
from tests.jobs.test_consumers import covered, frames_until, has_seq, in_thread, run, setup, store_batches

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["setup"]  # the fixture, used by name

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def gated(app: ASGIApp, gate: asyncio.Event) -> ASGIApp:
    """The application behind a server whose writes to the client block while `gate` is clear, as a server
    does (uvicorn, hypercorn) when the client stops reading and the TCP window fills."""

    async def serve(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def slow_send(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.send":
                await gate.wait()
            await send(message)

        await app(scope, receive, slow_send)

    return serve


async def viewer(user: User, job: Job, app: ASGIApp = application) -> WebsocketCommunicator:
    """A logged-in socket subscribed to `job`, its backlog done (the `subscribed` frame received)."""
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie.encode())]
    comm = WebsocketCommunicator(app, "/ws/", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"action": "subscribe", "job": job.pk})
    await frames_until(comm, lambda frames: any(f["type"] == "subscribed" for f in frames))
    return comm


def group_size(job: Job) -> int:
    """How many channels the job's group holds in Redis (the layer's sorted set of members)."""
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    return int(redis.Redis.from_url(settings.REDIS_URL).zcard(f"{prefix}:group:{job_group(job.pk)}"))


def test_one_group_member_and_one_read_per_batch_for_many_viewers(setup: tuple[Tenant, User, Job]) -> None:
    _, user, job = setup
    batches, size = 20, 10

    async def scenario() -> None:
        comms = [await viewer(user, job) for _ in range(5)]
        assert await asyncio.to_thread(group_size, job) == 1  # one channel for the process, not five
        feed = feeds().feeds[job.pk]
        assert len(feed.viewers) == 5
        writer = in_thread(lambda: store_batches(job, batches, size, pause=0.01))
        received = [await frames_until(comm, has_seq(batches * size)) for comm in comms]
        writer.join()
        for frames in received:
            assert covered(frames) == list(range(1, batches * size + 1))  # each line once, in order
            assert not [f for f in frames if f["type"] == "gap"]
        assert feed.reads == batches  # each published batch read from Redis once, for all five viewers
        for comm in comms:
            await comm.disconnect()
        assert job.pk not in feeds().feeds  # the last viewer out stopped the feed and left the group
        assert await asyncio.to_thread(group_size, job) == 0

    run(scenario)


def test_a_viewer_that_cannot_keep_up_gets_a_gap_to_catch_up_from_the_api(
    setup: tuple[Tenant, User, Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, user, job = setup
    monkeypatch.setattr(consumers, "OUTBOX_LINES", 300)
    batches, size = 20, 100

    async def scenario() -> None:
        gate = asyncio.Event()
        gate.set()
        fast = await viewer(user, job)
        slow = await viewer(user, job, gated(application, gate))
        gate.clear()  # the slow viewer's client stops reading
        writer = in_thread(lambda: store_batches(job, batches, size, pause=0.02))
        fast_frames = await frames_until(fast, has_seq(batches * size), timeout=30)
        writer.join()
        assert covered(fast_frames) == list(range(1, batches * size + 1))
        assert not [f for f in fast_frames if f["type"] == "gap" and f.get("reason") == "slow"]

        gate.set()  # it reads again: what it missed is one gap per learner, then the newest lines
        slow_frames = await frames_until(slow, has_seq(batches * size), timeout=30)
        slow_gaps = [f for f in slow_frames if f["type"] == "gap" and f.get("reason") == "slow"]
        assert slow_gaps
        assert covered(slow_frames) == list(range(1, batches * size + 1))  # lines or gaps, each seq once
        # It was not sent the backlog it could not take: at most the frame its server was stuck writing, the
        # outbox below OUTBOX_LINES, and the frame that found the outbox full. A frame is what the feed
        # gathered in one flush (several published batches on a busy machine), the same for both viewers.
        biggest = max(len(f["lines"]) for f in fast_frames if f["type"] == "logs")
        lines = sum(len(f["lines"]) for f in slow_frames if f["type"] == "logs")
        assert lines <= consumers.OUTBOX_LINES - 1 + 2 * biggest
        assert lines < batches * size
        for comm in (fast, slow):
            await comm.disconnect()

    run(scenario)


def test_a_feed_holds_at_most_buffer_lines_per_learner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(livefeed, "BUFFER_LINES", 3)
    handed: list[livefeed.Batch] = []

    class Sink:
        def feed_batch(self, batch: livefeed.Batch) -> None:
            handed.append(batch)

        def feed_message(self, job_id: str, payload: dict[str, Any]) -> None:
            raise AssertionError(payload)

        def feed_failed(self, job_id: str, error: BaseException) -> None:
            raise AssertionError(error)

    async def scenario() -> None:
        feed = livefeed.JobFeed(livefeed.FeedRegistry(), get_channel_layer(), "j")
        feed.viewers.add(Sink())
        lines = [[seq, f"l{seq}"] for seq in range(1, 6)]
        feed._gather({"learner": 0, "lines": lines, "metrics": [["loss", 1, 0.5, 1], ["loss", 5, 0.1, 5]]})
        feed._flush()
        feed.stop()

    run(scenario)
    [batch] = handed
    assert batch.lines == [[3, "l3"], [4, "l4"], [5, "l5"]] and batch.points == [["loss", 5, 0.1, 5]]


def test_sockets_subscribing_together_read_the_full_backlog_pages_once(
    setup: tuple[Tenant, User, Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, user, job = setup
    store_batches(job, 5, 500)  # 2,500 lines: two full pages of 1,000 and one of 500
    reads: list[int] = []
    real = consumers._backlog_page

    def counted(job: Job, learner: int, after: int) -> Any:
        reads.append(after)
        return real(job, learner, after)

    monkeypatch.setattr(consumers, "_backlog_page", counted)

    async def scenario() -> None:
        comms = await asyncio.gather(*(viewer(user, job) for _ in range(3)))
        for comm in comms:
            frames = await frames_until(comm, has_seq(2500))
            assert covered(frames) == list(range(1, 2501))
            await comm.disconnect()

    run(scenario)
    # The full pages once for all three; the last, which may still grow, at most once per socket (a read
    # begun after a socket joined the feed is shared with it: test_consumer_connect.py).
    assert sorted(reads)[:3] == [0, 1000, 2000] and sorted(reads)[3:] in ([], [2000], [2000, 2000])
