"""The live WebSocket endpoint (`/ws/`): job logs, metrics and status for the browser.

The consumer only authenticates, authorizes each subscription through the scoping helper and forwards what
`jobs.streams` publishes. Protocol, batching and back-pressure are described in docs/streaming.md.

A job's live messages come from its feed (`jobs.livefeed`): one reader per job per process, whatever the
number of sockets following it, which hands each socket batches of lines (one per learner at most every
FLUSH_INTERVAL) with their frames encoded once. A socket in step with the feed queues that shared text; one
that is not (its backlog still being read, a hole to announce) goes through its own bounded buffer. Every
live frame leaves through the socket's outbox, drained by one sender task; a socket whose outbox still holds
OUTBOX_LINES lines when new ones come (its client or its server's write path is not keeping up) has those
replaced by one `gap` per learner ("slow"): its client catches up from the REST API, and it goes on live
from the newest lines instead of falling further behind.

The socket's authentication is checked again before every subscription (but the first, when it comes
within AUTH_FRESH_SECONDS of the handshake, which checked it) and every LIVE_AUTH_RECHECK_SECONDS
(a token revoked or expired, a session logged out, a user deactivated or a password changed): once it no
longer holds, the socket closes with 4401, which clients do not retry.

Its tasks are supervised: one that fails (the channel layer's connection lost under a feed, PostgreSQL
gone under the authentication check) closes the socket with CLOSE_STREAM_FAILED, and so does a failure while
answering a client message or on the socket's own channel, so the client reconnects and resubscribes from
its last sequences instead of waiting on a socket nothing feeds any more. The code is one of the platform's
own (4503): the WebSocket protocol reserves 1011 to the server itself, and daphne's library refuses to send
it for an application, which left such a socket open and silent. Whichever way the socket ends, every task it
started is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from common.livereads import live_read
from jobs.livefeed import Batch, feeds
from jobs.models import Job
from jobs.selectors import job_get, job_log_rows
from jobs.streams import tenant_group
from tenants.models import Tenant
from tenants.scoping import Perm, tenants_for
from tenants.ws_auth import still_authenticated

log = logging.getLogger(__name__)

BUFFER_LINES = 5000
OUTBOX_LINES = 5000
AUTH_FRESH_SECONDS = 1.0
CHUNK_LINES = 1000
MAX_SUBSCRIPTIONS = 100
CLOSE_UNAUTHENTICATED = 4401
# The stream behind the socket failed: clients reconnect with backoff (docs/streaming.md).
CLOSE_STREAM_FAILED = 4503
NOT_FOUND = "not found"
# What a job id or tenant slug can look like (anything else exists nowhere, and would break a group name).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

T = TypeVar("T")
Line = list[Any]  # [seq, text]
Point = list[Any]  # [name, step, value, log_seq]


class ProtocolError(ValueError):
    """A client message this endpoint cannot act on; its text goes back to the client."""


@dataclass
class _Stream:
    """One learner of one subscribed job: the last sequence the client has, and what waits to be sent."""

    sent: int = 0
    lines: deque[Line] = field(default_factory=deque)
    points: deque[Point] = field(default_factory=deque)
    evicted_to: int = 0

    def add(self, lines: list[Line], points: list[Point]) -> None:
        """Buffer a live batch, dropping the oldest lines (and points) beyond BUFFER_LINES."""
        self.lines.extend(line for line in lines if line[0] > self.sent)
        self.points.extend(point for point in points if point[3] > self.sent)
        while len(self.lines) > BUFFER_LINES:
            self.evicted_to = max(self.evicted_to, self.lines.popleft()[0])
        while len(self.points) > BUFFER_LINES:
            self.evicted_to = max(self.evicted_to, self.points.popleft()[3])

    def take(self) -> tuple[list[tuple[int, int]], list[Line], list[Point]]:
        """Empty the buffer: the missing ranges, the new lines in order, and the points of those lines."""
        floor = max(self.sent, self.evicted_to)
        fresh = sorted({int(seq): [seq, text] for seq, text in self.lines if seq > floor}.items())
        kept = {seq for seq, _ in fresh}
        points = [point for point in self.points if point[3] in kept]
        gaps = []
        expected = self.sent + 1
        for seq, _ in fresh:
            if seq > expected:
                gaps.append((expected, seq - 1))
            expected = seq + 1
        if fresh:
            self.sent = fresh[-1][0]
        self.lines.clear()
        self.points.clear()
        self.evicted_to = 0
        return gaps, [line for _, line in fresh], points


@dataclass
class _JobSub:
    """One job subscription: a stream per learner, and the messages held while its backlog is sent."""

    ready: bool = False
    streams: dict[int, _Stream] = field(default_factory=dict)
    held_status: list[dict[str, Any]] = field(default_factory=list)

    def stream(self, learner: int) -> _Stream:
        return self.streams.setdefault(learner, _Stream())


def _visible_job(user: Any, job_id: str) -> Job | None:
    """The job if `user` may see it (through the scoping helper), else None: missing and foreign alike."""
    try:
        return job_get(user=user, job_id=job_id)
    except Job.DoesNotExist:
        return None


def _visible_tenant(user: Any, slug: str) -> Tenant | None:
    """The tenant if `user` holds VIEW on it, else None."""
    return tenants_for(user, Perm.VIEW).filter(slug=slug).first()


def _learner_indexes(job: Job) -> list[int]:
    """Every learner index that may hold log lines: the current count and any learner row of any attempt."""
    rows = set(job.learner_set.order_by().values_list("index", flat=True))
    return sorted(rows | set(range(job.learners)))


def _job_and_learners(user: Any, job_id: str) -> tuple[Job, list[int]] | None:
    """The job (if `user` may still see it) and its learner indexes, in one trip to the database."""
    job = _visible_job(user, job_id)
    return None if job is None else (job, _learner_indexes(job))


@dataclass
class _Out:
    """A frame waiting in a socket's outbox: its text, and for lines what the `gap` replacing it would say."""

    text: str
    job: str = ""
    learner: int = -1
    kind: str = ""  # "logs" and "points" (the metric points of those lines) may be dropped for a gap
    first: int = 0
    last: int = 0
    count: int = 0


def _backlog_page(job: Job, learner: int, after: int) -> tuple[list[Line], list[Point]]:
    """Up to CHUNK_LINES stored lines of a learner after `after`, and the metric points of those lines."""
    rows = job_log_rows(job=job, learner=learner, after=after, limit=CHUNK_LINES)
    lines = [[seq, text] for _, _, seq, _, text in rows]
    if not lines:
        return [], []
    samples = job.metric_samples.filter(learner=learner, log_seq__gt=after, log_seq__lte=lines[-1][0])
    points = [[s.name, s.step, s.value, s.log_seq] for s in samples.order_by("log_seq", "pk")]
    return lines, points


async def _page(job: Job, learner: int, after: int) -> Batch | None:
    """A backlog page, read in a live-db thread: sockets subscribing together read in parallel, not one
    after another on the one thread-sensitive thread of the process."""
    lines, points = await _read(_backlog_page, job, learner, after)
    return Batch(job.pk, learner, lines, points) if lines else None


async def _read(func: Callable[..., T], *args: Any) -> T:
    """Run a read-only database function in a live-db thread (`common.livereads`: a few threads that keep
    their connections): every database read of a socket goes this way, none queues on the one
    thread-sensitive thread the whole process shares."""
    return await live_read(func, *args)


def _parse_after(raw: Any) -> dict[int, int]:
    """The client's `after` map ({"0": 120}) as ints; empty when absent."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError('"after" must be an object of learner index to last sequence')
    try:
        after = {int(key): int(value) for key, value in raw.items()}
    except (TypeError, ValueError):
        raise ProtocolError('"after" must map learner indexes to integer sequences') from None
    if any(key < 0 or value < 0 for key, value in after.items()):
        raise ProtocolError('"after" keys and values must not be negative')
    return after


def _text_field(content: dict[str, Any], name: str) -> str:
    value = content.get(name)
    if not isinstance(value, str) or not value or len(value) > 100:
        raise ProtocolError(f'"{name}" is required and must be a non-empty string')
    if not _NAME.fullmatch(value):
        raise ProtocolError(f'"{name}" must be an id: letters, digits, "-" and "_", at most 64')
    return value


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """One browser socket: any number of job and tenant subscriptions, batched and bounded per client."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve the socket; however it ends (a disconnect, or a failure under it: the layer's connection
        lost under the socket's own channel, the database gone while answering a message), no task of it
        outlives it, and a failure closes an accepted socket with CLOSE_STREAM_FAILED."""
        try:
            await super().__call__(scope, receive, send)
        except Exception:
            if not getattr(self, "accepted", False) or getattr(self, "closing", False):
                raise
            log.error(
                "live socket failed; closing it (%s) for the client to reconnect",
                CLOSE_STREAM_FAILED,
                exc_info=True,
            )
            self._stop_tasks()
            with contextlib.suppress(Exception):  # the client may be gone already
                await self.close(code=CLOSE_STREAM_FAILED)
            await self.disconnect(CLOSE_STREAM_FAILED)  # the consumer ends here: leave the groups now
        finally:
            self._stop_tasks()
            for job_id in list(getattr(self, "jobs", {})):  # a cancelled consumer: leave its feeds at least
                feeds().drop(job_id, self)

    async def dispatch(self, message: Any) -> None:
        """Channels' dispatch without its `aclose_old_connections()` before every message: that call queues
        on the one thread-sensitive thread, so with many sockets connecting each `connect` and `subscribe`
        waited behind every other socket's work there. It tidies connections of sync code run on that thread
        outside `database_sync_to_async`; this consumer has none (its reads go through `_read`, whose threads
        look after their own connections)."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        """Accept, then close with 4401 for an anonymous user (so the browser sees why). The handshake just
        authenticated the user: the first recheck is due LIVE_AUTH_RECHECK_SECONDS later."""
        self.jobs: dict[str, _JobSub] = {}
        self.tenants: set[str] = set()
        self.last_status: dict[str, tuple[str, str, str]] = {}
        self.outbox: deque[_Out] = deque()
        self.outbox_lines = 0
        self.wake = asyncio.Event()
        self.sender: asyncio.Task[None] | None = None
        self.closer: asyncio.Task[None] | None = None
        self.auth_watch: asyncio.Task[None] | None = None
        self.closing = False
        self.auth_checked = asyncio.get_running_loop().time()
        self.handshake_fresh = True  # the handshake's check covers the first subscription, if soon
        await self.accept()
        self.accepted = True
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.auth_watch = self._supervised(self._watch_auth(), "live-auth")

    async def _authenticated(self) -> bool:
        """Whether the socket's token or session still holds; closes it with 4401 when not."""
        if await _read(still_authenticated, self.scope):
            self.auth_checked = asyncio.get_running_loop().time()
            return True
        if self.closer is None:
            self._stop_tasks()
            self.closer = asyncio.ensure_future(self.close(code=CLOSE_UNAUTHENTICATED))
        return False

    async def _watch_auth(self) -> None:
        """Check the socket's authentication every LIVE_AUTH_RECHECK_SECONDS while it is open."""
        while True:
            await asyncio.sleep(settings.LIVE_AUTH_RECHECK_SECONDS)
            if not await self._authenticated():
                return

    async def disconnect(self, code: int) -> None:
        """Stop the tasks this socket started and leave every feed and group (a layer that fails meanwhile
        is only logged: the groups expire by themselves)."""
        self._stop_tasks()
        try:
            for job_id in list(getattr(self, "jobs", {})):
                await self._unsubscribe(job_id)
            for slug in list(getattr(self, "tenants", set())):
                await self.channel_layer.group_discard(tenant_group(slug), self.channel_name)
        except Exception:
            log.warning("could not leave the groups of a closed live socket", exc_info=True)

    def _stop_tasks(self) -> None:
        """Cancel the sender and the authentication watch (they end at their next await)."""
        for name in ("sender", "auth_watch"):
            task = getattr(self, name, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()

    def _supervised(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run a task that feeds this socket; should it fail, the socket is closed (`_task_ended`)."""
        task = asyncio.create_task(coroutine, name=name)
        task.add_done_callback(self._task_ended)
        return task

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """The sender or the authentication watch ended. A failure would leave the socket open with nothing
        feeding it: close it with CLOSE_STREAM_FAILED, so the client reconnects."""
        if task.cancelled() or task.exception() is None:
            return
        self._fail(task.get_name(), task.exception())

    def _fail(self, what: str, error: BaseException | None) -> None:
        if self.closer is not None:
            return
        log.error(
            "live socket: %s failed; closing the socket (%s) for the client to reconnect",
            what,
            CLOSE_STREAM_FAILED,
            exc_info=error,
        )
        self._stop_tasks()
        self.closer = asyncio.ensure_future(self.close(code=CLOSE_STREAM_FAILED))

    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None:
        """Close once: later closes (a task failing while the socket is already closing) send nothing."""
        if getattr(self, "closing", False):
            return
        self.closing = True
        await super().close(code=code, reason=reason)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Decode one client message; anything unreadable gets an error frame and the socket stays open."""
        if text_data is None:
            await self.send_json({"type": "error", "error": "send JSON text frames, not binary"})
            return
        try:
            content = json.loads(text_data)
        except ValueError as exc:
            await self.send_json({"type": "error", "error": f"invalid JSON: {exc}"})
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Dispatch one action; protocol errors are answered, never raised."""
        if not isinstance(content, dict):
            await self.send_json({"type": "error", "error": "a message must be a JSON object"})
            return
        action = content.get("action")
        subscribing = action in ("subscribe", "subscribe_tenant")
        fresh = (
            self.handshake_fresh
            and asyncio.get_running_loop().time() - self.auth_checked < AUTH_FRESH_SECONDS
        )
        if subscribing:
            self.handshake_fresh = False
        if subscribing and not fresh and not await self._authenticated():
            return
        try:
            if action == "subscribe":
                await self._subscribe(_text_field(content, "job"), _parse_after(content.get("after")))
            elif action == "unsubscribe":
                job_id = _text_field(content, "job")
                await self._unsubscribe(job_id)
                await self.send_json({"type": "unsubscribed", "job": job_id})
            elif action == "subscribe_tenant":
                await self._subscribe_tenant(_text_field(content, "tenant"))
            elif action == "unsubscribe_tenant":
                slug = _text_field(content, "tenant")
                self.tenants.discard(slug)
                await self.channel_layer.group_discard(tenant_group(slug), self.channel_name)
                await self.send_json({"type": "unsubscribed_tenant", "tenant": slug})
            else:
                raise ProtocolError(f"unknown action {action!r}")
        except ProtocolError as exc:
            error: dict[str, Any] = {"type": "error", "error": str(exc)}
            if isinstance(content.get("job"), str):
                error["job"] = content["job"]
            await self.send_json(error)

    async def _subscribe(self, job_id: str, after: dict[int, int]) -> None:
        """Follow the job's feed, authorize, answer `subscribed`, send the backlog; live follows."""
        if job_id not in self.jobs and len(self.jobs) >= MAX_SUBSCRIPTIONS:
            raise ProtocolError(f"at most {MAX_SUBSCRIPTIONS} job subscriptions per socket")
        await self._unsubscribe(job_id)
        sub = _JobSub()
        self.jobs[job_id] = sub
        # Follow the feed first, then read the job once (and authorize): a status change in between is then
        # either in the read or comes live. Nothing of the feed reaches the client before `subscribed`, and a
        # job the user may not see is left at once.
        await feeds().follow(self.channel_layer, job_id, self)
        followed = asyncio.get_running_loop().time()
        found = await _read(_job_and_learners, self.scope["user"], job_id)
        if found is None:
            await self._unsubscribe(job_id)
            await self.send_json({"type": "error", "job": job_id, "error": NOT_FOUND})
            return
        job, learners = found
        self.last_status[job_id] = (job.status, job.reason, job.message)
        await self.send_json(
            {
                "type": "subscribed",
                "job": job_id,
                "status": job.status,
                "reason": job.reason,
                "message": job.message,
                "learners": job.learners,
            }
        )
        for learner in sorted(set(learners) | set(after)):
            sent = await self._send_backlog(job, learner, after.get(learner, 0), followed)
            sub.stream(learner).sent = sent
        if self.jobs.get(job_id) is not sub:
            return  # unsubscribed meanwhile
        sub.ready = True
        self._flush_job(job_id, sub)
        for payload in sub.held_status:
            self.feed_message(job_id, payload)
        sub.held_status.clear()

    async def _send_backlog(self, job: Job, learner: int, after: int, followed: float) -> int:
        """Send a learner's stored lines after `after` in chunks; returns the last sequence sent. Chunks are
        shared with other sockets reading the same backlog (`FeedRegistry.backlog_page`): full ones, and a
        last one whose read began after this socket joined the job's feed (at `followed`)."""
        while True:
            page = await feeds().backlog_page(
                job.pk, learner, after, CHUNK_LINES, partial(_page, job, learner, after), followed
            )
            if page is None:
                return after
            await self.send(text_data=page.logs_text())
            points = page.metrics_text()
            if points is not None:
                await self.send(text_data=points)
            after = page.last
            if len(page.lines) < CHUNK_LINES:
                return after

    async def _unsubscribe(self, job_id: str) -> None:
        """Leave a job's feed and drop its queued frames; nothing more is sent for it."""
        if self.jobs.pop(job_id, None) is None:
            return
        if any(out.job == job_id for out in self.outbox):
            kept = [out for out in self.outbox if out.job != job_id]
            self.outbox = deque(kept)
            self.outbox_lines = sum(out.count for out in kept)
        await feeds().unfollow(job_id, self)

    async def _subscribe_tenant(self, slug: str) -> None:
        """Status changes of all of a tenant's jobs, for users with VIEW on it."""
        tenant = await _read(_visible_tenant, self.scope["user"], slug)
        if tenant is None:
            await self.send_json({"type": "error", "tenant": slug, "error": NOT_FOUND})
            return
        self.tenants.add(slug)
        await self.channel_layer.group_add(tenant_group(slug), self.channel_name)
        await self.send_json({"type": "subscribed_tenant", "tenant": slug})

    # --- what the job feeds hand over (jobs.livefeed.Viewer) -------------------------------------------

    def feed_batch(self, batch: Batch) -> None:
        """New lines of a followed job: the feed's shared frames when this socket is in step with it,
        else through the learner's buffer (backlog still being sent, an overlap, a hole to announce)."""
        sub = self.jobs.get(batch.job)
        if sub is None:
            return
        stream = sub.stream(batch.learner)
        if sub.ready and not stream.lines and batch.first > stream.sent:
            if batch.first > stream.sent + 1:  # lost in the layer
                self._queue_gap(batch.job, batch.learner, stream.sent + 1, batch.first - 1)
            stream.sent = batch.last
            self._queue_lines(batch.job, batch.learner, batch.logs_text(), batch.first, batch.last, batch)
            return
        stream.add(batch.lines, batch.points)
        if sub.ready:
            self._flush_job(batch.job, sub)

    def feed_message(self, job_id: str, payload: dict[str, Any]) -> None:
        """A status change, metric points of no log line, or a `parts` nudge of a followed job."""
        sub = self.jobs.get(job_id)
        if sub is None:
            return
        kind = payload.get("kind")
        if kind in ("status", "metrics") and not sub.ready:
            sub.held_status.append(payload)
        elif kind == "status":
            self._send_status(payload)
        elif kind == "metrics":
            points = list(payload.get("metrics") or [])
            if points:
                frame = {
                    "type": "metrics",
                    "job": job_id,
                    "learner": int(payload["learner"]),
                    "points": points,
                }
                self._queue(_Out(json.dumps(frame)))
        elif kind == "parts" and sub.ready:
            self._queue(_Out(json.dumps({"type": "parts", "job": job_id})))

    def feed_failed(self, job_id: str, error: BaseException) -> None:
        """The job's feed lost the layer: close, so the client reconnects and resubscribes."""
        self._fail(f"the feed of job {job_id}", error)

    async def job_message(self, event: dict[str, Any]) -> None:
        """A message on a tenant group (the socket's own channel): forward status changes, except those of
        jobs subscribed one by one, which their feed delivers (in order, after their logs)."""
        payload = event.get("payload") or {}
        if payload.get("kind") == "status" and self.tenants and str(payload.get("job")) not in self.jobs:
            self._send_status(payload)

    def _send_status(self, payload: dict[str, Any]) -> None:
        """Queue a status change, skipping a repeat of the last one sent for the job (the status a
        `subscribed` frame already told, published just before the socket joined the group)."""
        job_id = str(payload.get("job"))
        state = (str(payload.get("status")), str(payload.get("reason", "")), str(payload.get("message", "")))
        if self.last_status.get(job_id) == state:
            return
        if len(self.last_status) > 10000:
            self.last_status.clear()
        self.last_status[job_id] = state
        status, reason, message = state
        frame: dict[str, Any] = {
            "type": "status",
            "job": job_id,
            "status": status,
            "reason": reason,
            "message": message,
        }
        if "borrowed" in payload:
            frame["borrowed"] = bool(payload["borrowed"])
        self._queue(_Out(json.dumps(frame)))

    def _flush_job(self, job_id: str, sub: _JobSub) -> None:
        """Queue what is buffered for one job: gaps first, then one logs and one metrics frame per learner."""
        if not sub.ready:
            return
        for learner, stream in sorted(sub.streams.items()):
            gaps, lines, points = stream.take()
            for low, high in gaps:
                self._queue_gap(job_id, learner, low, high)
            if lines:
                frame = {"type": "logs", "job": job_id, "learner": learner, "lines": lines}
                batch = Batch(job_id, learner, lines, points)
                self._queue_lines(
                    job_id, learner, json.dumps(frame), int(lines[0][0]), int(lines[-1][0]), batch
                )

    # --- the outbox -------------------------------------------------------------------------------------

    def _queue_gap(self, job_id: str, learner: int, low: int, high: int, reason: str = "") -> None:
        frame: dict[str, Any] = {
            "type": "gap",
            "job": job_id,
            "learner": learner,
            "from_seq": low,
            "to_seq": high,
        }
        if reason:
            frame["reason"] = reason
        self._queue(_Out(json.dumps(frame), job=job_id, learner=learner))

    def _queue_lines(self, job_id: str, learner: int, text: str, first: int, last: int, batch: Batch) -> None:
        if self.outbox_lines >= OUTBOX_LINES:  # what came before is still waiting: the socket is behind
            self._drop_behind()
        count = last - first + 1
        self._queue(_Out(text, job_id, learner, "logs", first, last, count))
        points = batch.metrics_text()
        if points is not None:
            self._queue(_Out(points, job_id, learner, "points", first, last))

    def _queue(self, out: _Out) -> None:
        """Queue a frame for the sender (started on first use), which sends the outbox in order."""
        if self.closing or self.closer is not None:
            return
        self.outbox.append(out)
        self.outbox_lines += out.count
        self.wake.set()
        if self.sender is None:
            self.sender = self._supervised(self._send_outbox(), "live-send")

    async def _send_outbox(self) -> None:
        while True:
            while self.outbox:
                out = self.outbox.popleft()
                self.outbox_lines -= out.count
                await self.send(text_data=out.text)
            self.wake.clear()
            await self.wake.wait()

    def _drop_behind(self) -> None:
        """The socket is not keeping up: replace its queued lines (and their points) by one `gap` per job and
        learner, where the first of them stood, so its client reads them from REST and the socket goes on
        live from the newest lines. Status and other frames stay, in order."""
        kept: list[_Out] = []
        ranges: dict[tuple[str, int], list[int]] = {}
        for out in self.outbox:
            if out.kind not in ("logs", "points"):
                kept.append(out)
                continue
            key = (out.job, out.learner)
            if key not in ranges:
                ranges[key] = [out.first, out.last, len(kept)]
                kept.append(out)  # the gap's place
            span = ranges[key]
            span[0], span[1] = min(span[0], out.first), max(span[1], out.last)
        for (job_id, learner), (low, high, index) in ranges.items():
            frame = {"type": "gap", "job": job_id, "learner": learner, "from_seq": low, "to_seq": high}
            kept[index] = _Out(json.dumps(frame | {"reason": "slow"}), job=job_id, learner=learner)
        log.info("live socket behind by %s lines: sent gaps instead", self.outbox_lines)
        self.outbox = deque(kept)
        self.outbox_lines = 0
