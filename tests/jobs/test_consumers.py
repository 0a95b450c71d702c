"""The live WebSocket endpoint against the real stack: AuthMiddlewareStack with a real session cookie, the
Redis channel layer and PostgreSQL; lines are stored through `logs_append`, which publishes after commit."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client

from jobs import consumers, livefeed
from jobs.consumers import _Stream
from jobs.core.states import JobStatus
from jobs.models import Job, Learner
from jobs.services import job_cancel, job_submit, job_transition
from jobs.services.logs import logs_append
from portal.asgi import application
from tenants.models import Tenant
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db(transaction=True)
Frame = dict[str, Any]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run an async scenario from a sync test (no asyncio plugin needed)."""
    async_to_sync(scenario)()


@pytest.fixture
def setup() -> Iterator[tuple[Tenant, User, Job]]:
    """A tenant, one of its members and a submitted job with one learner row."""
    tenant = make_tenant()
    user = member(tenant, "member")
    job = job_submit(tenant=tenant, user=user, document={"name": "a", "image": "b", "command": ["c"]})
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="p")
    yield tenant, user, job


def store(job: Job, texts: list[str], learner: int = 0, *, nested: bool = False) -> None:
    """Store one batch as the log follower does (`nested`: inside the caller's transaction)."""
    append = logs_append.nested if nested else logs_append
    append(job_id=job.pk, attempt=1, learner=learner, records=[(None, t) for t in texts], cursor=(None, 0))


def store_batches(job: Job, batches: int, size: int, pause: float = 0.0, *, nested: bool = False) -> None:
    """Store `batches` batches of `size` numbered lines (from the line number the learner is at)."""
    for b in range(batches):
        store(job, [f"line {b * size + i + 1}" for i in range(size)], nested=nested)
        if pause:
            time.sleep(pause)


def store_burst(job: Job, batches: int, size: int) -> None:
    """Store many batches in one transaction: their after-commit publishes then fire back to back, the
    way a follower catching up on a chatty pod sends them."""
    with transaction.atomic():
        store_batches(job, batches, size, nested=True)


def in_thread(target: Callable[[], None]) -> threading.Thread:
    """Start `target` in a thread with its own database connection, closed when it ends."""

    def body() -> None:
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


async def connect(user: User | None) -> WebsocketCommunicator:
    """A socket through the real ASGI application, logged in with a real session cookie when `user`."""
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if user is not None:
        client = Client()
        await database_sync_to_async(client.force_login)(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    comm = WebsocketCommunicator(application, "/ws/", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    return comm


async def frames_until(
    comm: WebsocketCommunicator, done: Callable[[list[Frame]], bool], timeout: float = 10
) -> list[Frame]:
    """Receive frames until `done(frames)` holds."""
    frames: list[Frame] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while not done(frames):
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, f"timed out; last frames: {frames[-3:]}"
        frames.append(await comm.receive_json_from(timeout=left))
    return frames


def seqs(frames: list[Frame], learner: int = 0) -> list[int]:
    """Every line sequence delivered for a learner, in delivery order."""
    return [line[0] for f in frames if f["type"] == "logs" and f["learner"] == learner for line in f["lines"]]


def covered(frames: list[Frame]) -> list[int]:
    """Sequences delivered as lines or announced as gaps, in order (each must appear once)."""
    out: list[int] = []
    for f in frames:
        if f["type"] == "logs":
            out += [line[0] for line in f["lines"]]
        elif f["type"] == "gap":
            out += list(range(f["from_seq"], f["to_seq"] + 1))
    return out


def has_seq(n: int) -> Callable[[list[Frame]], bool]:
    return lambda frames: n in covered(frames)


def test_anonymous_connection_is_closed_with_4401() -> None:
    async def scenario() -> None:
        comm = await connect(None)
        assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
        await comm.disconnect()  # end the application instance here, not in the loop's shutdown

    run(scenario)


def test_subscribe_own_job_gets_subscribed_then_backlog_in_order(setup: tuple[Tenant, User, Job]) -> None:
    _, user, job = setup
    store(job, [f"l{i}" for i in range(1, 2501)] + ['{"metric": "loss", "value": 0.5, "step": 1}'])

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        frames = await frames_until(comm, has_seq(2501))
        assert frames[0] == {
            "type": "subscribed",
            "job": job.pk,
            "status": "queued",
            "reason": job.reason,
            "message": job.message,
            "learners": 1,
        }
        assert seqs(frames) == list(range(1, 2502))
        assert all(len(f["lines"]) <= 1000 for f in frames if f["type"] == "logs")
        assert frames[1]["lines"][0] == [1, "l1"]
        metrics = await comm.receive_json_from(timeout=5)
        assert metrics["type"] == "metrics" and metrics["learner"] == 0
        assert sorted(metrics["points"]) == [["loss", 1, 0.5, 2501]]
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()

    run(scenario)


def test_other_tenants_job_is_not_found_exactly_like_a_missing_one(setup: tuple[Tenant, User, Job]) -> None:
    _, _, job = setup
    stranger = member(make_tenant(), "owner")

    async def scenario() -> None:
        comm = await connect(stranger)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        foreign = await comm.receive_json_from(timeout=5)
        await comm.send_json_to({"action": "subscribe", "job": "nosuchjob"})
        missing = await comm.receive_json_from(timeout=5)
        assert foreign == {"type": "error", "job": job.pk, "error": "not found"}
        assert missing == {"type": "error", "job": "nosuchjob", "error": "not found"}
        await comm.send_json_to({"action": "subscribe_tenant", "tenant": job.tenant.slug})
        assert await comm.receive_json_from(timeout=5) == {
            "type": "error",
            "tenant": job.tenant.slug,
            "error": "not found",
        }
        await comm.send_json_to({"action": "subscribe", "job": "nosuchjob"})
        assert (await comm.receive_json_from(timeout=5))["error"] == "not found"  # still open
        await comm.disconnect()

    run(scenario)


def test_subscribe_with_after_skips_what_the_client_has(setup: tuple[Tenant, User, Job]) -> None:
    _, user, job = setup
    Learner.objects.create(job=job, attempt=1, index=1, pod_name="q")
    store(job, [f"a{i}" for i in range(1, 11)], learner=0)
    store(job, [f"b{i}" for i in range(1, 6)], learner=1)

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk, "after": {"0": 7}})
        frames = await frames_until(comm, lambda fs: 5 in seqs(fs, 1))
        assert seqs(frames, 0) == [8, 9, 10]
        assert seqs(frames, 1) == [1, 2, 3, 4, 5]
        await database_sync_to_async(store)(job, ["a11"], 0)
        live = await comm.receive_json_from(timeout=5)
        assert live == {"type": "logs", "job": job.pk, "learner": 0, "lines": [[11, "a11"]]}
        await comm.disconnect()

    run(scenario)


def test_line_stored_while_subscribed_arrives_live_exactly_once(setup: tuple[Tenant, User, Job]) -> None:
    _, user, job = setup
    store(job, ["old"])

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(comm, has_seq(1))
        await database_sync_to_async(store)(job, ["new", "step=3 acc=0.9"])
        frames = await frames_until(comm, lambda fs: any(f["type"] == "metrics" for f in fs))
        assert frames[0] == {
            "type": "logs",
            "job": job.pk,
            "learner": 0,
            "lines": [[2, "new"], [3, "step=3 acc=0.9"]],
        }
        assert frames[1]["points"] == [["acc", 3, 0.9, 3]]
        assert await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()

    run(scenario)


def test_backlog_live_boundary_has_no_duplicates_and_no_losses(setup: tuple[Tenant, User, Job]) -> None:
    _, user, job = setup
    store_batches(job, 20, 100)
    total = 20 * 100 + 60 * 50

    async def scenario() -> None:
        writer = in_thread(lambda: store_batches(job, 60, 50, pause=0.003))
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        frames = await frames_until(comm, has_seq(total), timeout=30)
        writer.join()
        assert covered(frames) == list(range(1, total + 1))
        assert not [f for f in frames if f["type"] == "gap"]
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()

    run(scenario)


def test_burst_is_coalesced_into_few_frames_in_order(setup: tuple[Tenant, User, Job]) -> None:
    _, user, job = setup
    batches, size = 200, 100

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(comm, lambda fs: bool(fs))
        await database_sync_to_async(store)(job, ["first"])  # the backlog is done once this arrives live
        await frames_until(comm, has_seq(1))
        writer = in_thread(lambda: store_burst(job, batches, size))
        frames = await frames_until(comm, has_seq(batches * size + 1), timeout=60)
        writer.join()
        assert covered(frames) == list(range(2, batches * size + 2))
        logs = [f for f in frames if f["type"] == "logs"]
        # Coalesced: frames carry several batches each (how many depends on the machine's speed, so the
        # count is not pinned; a busy machine coalesces less).
        assert len(logs) < batches, len(logs)
        assert max(len(f["lines"]) for f in logs) > size
        await comm.disconnect()

    run(scenario)


def test_buffer_overflow_drops_oldest_lines_and_announces_a_gap(
    setup: tuple[Tenant, User, Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, user, job = setup
    monkeypatch.setattr(consumers, "BUFFER_LINES", 150)
    monkeypatch.setattr(livefeed, "BUFFER_LINES", 150)

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        await frames_until(comm, lambda fs: bool(fs))
        await database_sync_to_async(store)(job, ["first"])  # the backlog is done once this arrives live
        await frames_until(comm, has_seq(1))
        await database_sync_to_async(store_burst)(job, 50, 100)
        frames = await frames_until(comm, has_seq(5001), timeout=30)
        gaps = [f for f in frames if f["type"] == "gap"]
        assert gaps and all(f["learner"] == 0 and f["from_seq"] <= f["to_seq"] for f in gaps)
        assert covered(frames) == list(range(2, 5002))
        assert all(len(f["lines"]) <= 150 for f in frames if f["type"] == "logs")
        await comm.disconnect()

    run(scenario)


def test_stream_buffer_drops_oldest_and_reports_the_missing_range() -> None:
    stream = _Stream(sent=10)
    stream.add([[s, "x"] for s in range(5, 13)], [["loss", 1, 1.0, 12]])
    stream.add([[s, "x"] for s in range(20, 22)], [])
    gaps, lines, points = stream.take()
    assert gaps == [(13, 19)]
    assert [line[0] for line in lines] == [11, 12, 20, 21]
    assert points == [["loss", 1, 1.0, 12]]
    assert stream.sent == 21
    assert stream.take() == ([], [], [])


def test_status_changes_reach_job_and_tenant_subscribers_once(setup: tuple[Tenant, User, Job]) -> None:
    tenant, user, job = setup

    async def scenario() -> None:
        both = await connect(user)
        await both.send_json_to({"action": "subscribe", "job": job.pk})
        await both.send_json_to({"action": "subscribe_tenant", "tenant": tenant.slug})
        await frames_until(both, lambda fs: [f["type"] for f in fs] == ["subscribed", "subscribed_tenant"])
        watcher = await connect(user)
        await watcher.send_json_to({"action": "subscribe_tenant", "tenant": tenant.slug})
        await frames_until(watcher, lambda fs: bool(fs))
        await database_sync_to_async(job_transition)(
            job_id=job.pk, to=JobStatus.STARTING, reason="Admitted", message="on node-a"
        )
        await database_sync_to_async(job_cancel)(job=job, user=user)
        expected = [("starting", "Admitted"), ("cancelling", "CancelledByUser")]
        for comm in (both, watcher):
            frames = await frames_until(comm, lambda fs: len(fs) == 2)
            assert all(f["type"] == "status" and f["job"] == job.pk for f in frames)
            assert [(f["status"], f["reason"]) for f in frames] == expected, frames
            assert frames[0]["message"] == "on node-a"
            assert [f["borrowed"] for f in frames] == [False, False]
            assert await comm.receive_nothing(timeout=0.3)
            await comm.disconnect()

    run(scenario)


def test_bad_messages_get_errors_and_the_socket_stays_open(setup: tuple[Tenant, User, Job]) -> None:
    _, user, job = setup

    async def scenario() -> None:
        comm = await connect(user)
        await comm.send_to(text_data="{not json")
        assert (await comm.receive_json_from(timeout=5))["error"].startswith("invalid JSON")
        for bad in (
            [1, 2],
            {"action": "dance"},
            {"action": "subscribe"},
            {"action": "subscribe", "job": job.pk, "after": {"x": 1}},
        ):
            await comm.send_json_to(bad)
            frame = await comm.receive_json_from(timeout=5)
            assert frame["type"] == "error" and frame["error"], frame
        await comm.send_json_to({"action": "subscribe", "job": job.pk})
        assert (await comm.receive_json_from(timeout=5))["type"] == "subscribed"
        await comm.send_json_to({"action": "unsubscribe", "job": job.pk})
        assert await comm.receive_json_from(timeout=5) == {"type": "unsubscribed", "job": job.pk}
        await database_sync_to_async(store)(job, ["after unsubscribe"])
        assert await comm.receive_nothing(timeout=0.3)
        await comm.disconnect()

    run(scenario)
