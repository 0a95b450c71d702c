"""The live WebSocket endpoint (`/ws/`): job logs, metrics and status for the browser.

The consumer only authenticates, authorizes each subscription through the scoping helper and forwards what
`jobs.streams` publishes. Protocol, batching and back-pressure are described in docs/streaming.md.

Each job subscription gets a channel of its own in the layer: the `logs` payloads that `jobs.services.lifecycle`
publishes to `job.<id>` do not name their job, so the channel a message arrives on says which job it is
about. A reader task per job drains that channel into a bounded buffer at once (also while the backlog is
being read), so the layer's capacity is not what limits a busy job; a flusher sends the buffers at most
every FLUSH_INTERVAL seconds, one frame per job and learner.

The socket's authentication is checked again before every subscription and every
LIVE_AUTH_RECHECK_SECONDS (a token revoked or expired, a session logged out, a user deactivated or a password
changed): once it no longer holds, the socket closes with 4401, which clients do not retry.

Those tasks are supervised: one that fails (the channel layer's connection lost under a reader, PostgreSQL
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
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from jobs.models import Job
from jobs.selectors import job_get, job_logs
from jobs.streams import job_group, tenant_group
from tenants.models import Tenant
from tenants.scoping import Perm, tenants_for
from tenants.ws_auth import still_authenticated

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.1
BUFFER_LINES = 5000
CHUNK_LINES = 1000
MAX_SUBSCRIPTIONS = 100
CLOSE_UNAUTHENTICATED = 4401
# The stream behind the socket failed: clients reconnect with backoff (docs/streaming.md).
CLOSE_STREAM_FAILED = 4503
NOT_FOUND = "not found"
# What a job id or tenant slug can look like (anything else exists nowhere, and would break a group name).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

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
    """One job subscription: its own layer channel, the task reading it, and a stream per learner."""

    channel: str
    reader: asyncio.Task[None] | None = None
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
    rows = set(job.learner_set.values_list("index", flat=True))
    return sorted(rows | set(range(job.learners)))


def _backlog_page(job: Job, learner: int, after: int) -> tuple[list[Line], list[Point]]:
    """Up to CHUNK_LINES stored lines of a learner after `after`, and the metric points of those lines."""
    lines = [
        [line.seq, line.text] for line in job_logs(job=job, learner=learner, after=after, limit=CHUNK_LINES)
    ]
    if not lines:
        return [], []
    samples = job.metric_samples.filter(learner=learner, log_seq__gt=after, log_seq__lte=lines[-1][0])
    points = [[s.name, s.step, s.value, s.log_seq] for s in samples.order_by("log_seq", "pk")]
    return lines, points


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
        lost under the socket's own channel, the database gone while answering a message), no reader or
        flusher outlives it, and a failure closes an accepted socket with CLOSE_STREAM_FAILED."""
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

    async def connect(self) -> None:
        """Accept, then close with 4401 for an anonymous user (so the browser sees why)."""
        self.jobs: dict[str, _JobSub] = {}
        self.tenants: set[str] = set()
        self.last_status: dict[str, tuple[str, str, str]] = {}
        self.flusher: asyncio.Task[None] | None = None
        self.last_flush = 0.0
        self.send_lock = asyncio.Lock()
        self.closer: asyncio.Task[None] | None = None
        self.auth_watch: asyncio.Task[None] | None = None
        self.closing = False
        await self.accept()
        self.accepted = True
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.auth_watch = self._supervised(self._watch_auth(), "live-auth")

    async def _authenticated(self) -> bool:
        """Whether the socket's token or session still holds; closes it with 4401 when not."""
        if await database_sync_to_async(still_authenticated)(self.scope):
            return True
        if self.closer is None:
            self._stop_tasks()
            self.closer = asyncio.ensure_future(self.close(code=CLOSE_UNAUTHENTICATED))
        return False

    async def _watch_auth(self) -> None:
        """Check the socket's authentication every LIVE_AUTH_RECHECK_SECONDS while it is open."""
        while await self._authenticated():
            await asyncio.sleep(settings.LIVE_AUTH_RECHECK_SECONDS)

    async def disconnect(self, code: int) -> None:
        """Stop the tasks this socket started and leave every group (a layer that fails meanwhile is only
        logged: the groups expire by themselves)."""
        self._stop_tasks()
        try:
            for job_id in list(getattr(self, "jobs", {})):
                await self._unsubscribe(job_id)
            for slug in list(getattr(self, "tenants", set())):
                await self.channel_layer.group_discard(tenant_group(slug), self.channel_name)
        except Exception:
            log.warning("could not leave the groups of a closed live socket", exc_info=True)

    def _stop_tasks(self) -> None:
        """Cancel every reader, the flusher and the authentication watch (they end at their next await)."""
        for sub in getattr(self, "jobs", {}).values():
            if sub.reader is not None:
                sub.reader.cancel()
        for name in ("flusher", "auth_watch"):
            task = getattr(self, name, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()

    def _supervised(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run a task that feeds this socket; should it fail, the socket is closed (`_task_ended`)."""
        task = asyncio.create_task(coroutine, name=name)
        task.add_done_callback(self._task_ended)
        return task

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """A reader or the flusher ended. A failure would leave the socket open with nothing feeding it:
        stop the other tasks and close it with CLOSE_STREAM_FAILED, so the client reconnects."""
        if task.cancelled() or task.exception() is None or self.closer is not None:
            return
        log.error(
            "live socket task %s failed; closing the socket (%s) for the client to reconnect",
            task.get_name(),
            CLOSE_STREAM_FAILED,
            exc_info=task.exception(),
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
        if action in ("subscribe", "subscribe_tenant") and not await self._authenticated():
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
        """Authorize, join the job's group, answer `subscribed`, send the backlog; live follows."""
        if job_id not in self.jobs and len(self.jobs) >= MAX_SUBSCRIPTIONS:
            raise ProtocolError(f"at most {MAX_SUBSCRIPTIONS} job subscriptions per socket")
        user = self.scope["user"]
        if await database_sync_to_async(_visible_job)(user, job_id) is None:
            await self.send_json({"type": "error", "job": job_id, "error": NOT_FOUND})
            return
        await self._unsubscribe(job_id)
        sub = _JobSub(channel=await self.channel_layer.new_channel())
        self.jobs[job_id] = sub
        await self.channel_layer.group_add(job_group(job_id), sub.channel)
        sub.reader = self._supervised(self._read(job_id, sub), f"live-read-{job_id}")
        # Read the job again after joining: a status change in between is then either here or live.
        job = await database_sync_to_async(_visible_job)(user, job_id)
        if job is None:
            await self._unsubscribe(job_id)
            await self.send_json({"type": "error", "job": job_id, "error": NOT_FOUND})
            return
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
        learners = await database_sync_to_async(_learner_indexes)(job)
        for learner in sorted(set(learners) | set(after)):
            sent = await self._send_backlog(job, learner, after.get(learner, 0))
            sub.stream(learner).sent = sent
        async with self.send_lock:
            sub.ready = True
            await self._flush_job(job_id, sub)
            for payload in sub.held_status:
                if payload.get("kind") == "metrics":
                    await self._send_points(job_id, payload)
                else:
                    await self._send_status(payload)
            sub.held_status.clear()

    async def _send_backlog(self, job: Job, learner: int, after: int) -> int:
        """Send a learner's stored lines after `after` in chunks; returns the last sequence sent."""
        while True:
            lines, points = await database_sync_to_async(_backlog_page)(job, learner, after)
            if not lines:
                return after
            await self.send_json({"type": "logs", "job": job.pk, "learner": learner, "lines": lines})
            if points:
                await self.send_json({"type": "metrics", "job": job.pk, "learner": learner, "points": points})
            after = int(lines[-1][0])
            if len(lines) < CHUNK_LINES:
                return after

    async def _unsubscribe(self, job_id: str) -> None:
        """Leave a job's group and stop its reader; nothing more is sent for it."""
        sub = self.jobs.pop(job_id, None)
        if sub is None:
            return
        if sub.reader is not None:
            sub.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure was handled as it ended
                await sub.reader
        await self.channel_layer.group_discard(job_group(job_id), sub.channel)

    async def _subscribe_tenant(self, slug: str) -> None:
        """Status changes of all of a tenant's jobs, for users with VIEW on it."""
        tenant = await database_sync_to_async(_visible_tenant)(self.scope["user"], slug)
        if tenant is None:
            await self.send_json({"type": "error", "tenant": slug, "error": NOT_FOUND})
            return
        self.tenants.add(slug)
        await self.channel_layer.group_add(tenant_group(slug), self.channel_name)
        await self.send_json({"type": "subscribed_tenant", "tenant": slug})

    async def _read(self, job_id: str, sub: _JobSub) -> None:
        """Drain a job subscription's own channel into its buffers as fast as messages come."""
        while True:
            message = await self.channel_layer.receive(sub.channel)
            try:
                payload = message.get("payload") or {}
                if payload.get("kind") == "logs":
                    stream = sub.stream(int(payload["learner"]))
                    stream.add(list(payload.get("lines") or []), list(payload.get("metrics") or []))
                    if sub.ready:
                        self._schedule_flush()
                elif payload.get("kind") == "metrics" and sub.ready:
                    async with self.send_lock:
                        await self._send_points(job_id, payload)
                elif payload.get("kind") in ("status", "metrics") and not sub.ready:
                    sub.held_status.append(payload)
                elif payload.get("kind") == "status":
                    async with self.send_lock:
                        await self._flush_job(job_id, sub)
                        await self._send_status(payload)
                elif payload.get("kind") == "parts" and sub.ready:
                    async with self.send_lock:
                        await self.send_json({"type": "parts", "job": job_id})
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring a malformed live message for job %s", job_id, exc_info=True)

    async def job_message(self, event: dict[str, Any]) -> None:
        """A message on a tenant group (the socket's own channel): forward status changes, except those of
        jobs subscribed one by one, which their own channel delivers (in order, after their logs)."""
        payload = event.get("payload") or {}
        if payload.get("kind") == "status" and self.tenants and str(payload.get("job")) not in self.jobs:
            async with self.send_lock:
                await self._send_status(payload)

    async def _send_status(self, payload: dict[str, Any]) -> None:
        """Forward a status change, skipping a repeat of the last one sent for the job (the status a
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
        await self.send_json(frame)

    async def _send_points(self, job_id: str, payload: dict[str, Any]) -> None:
        """Forward metric points that come from no log line (TensorBoard event files): at once, as they came."""
        points = list(payload.get("metrics") or [])
        if points:
            learner = int(payload["learner"])
            await self.send_json({"type": "metrics", "job": job_id, "learner": learner, "points": points})

    def _schedule_flush(self) -> None:
        if self.flusher is None or self.flusher.done():
            self.flusher = self._supervised(self._flush_loop(), "live-flush")

    async def _flush_loop(self) -> None:
        """Flush every FLUSH_INTERVAL at most, while anything is buffered."""
        loop = asyncio.get_running_loop()
        while True:
            delay = self.last_flush + FLUSH_INTERVAL - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.last_flush = loop.time()
            async with self.send_lock:
                for job_id, sub in list(self.jobs.items()):
                    await self._flush_job(job_id, sub)
            if not any(
                sub.ready and (stream.lines or stream.points)
                for sub in self.jobs.values()
                for stream in sub.streams.values()
            ):
                return

    async def _flush_job(self, job_id: str, sub: _JobSub) -> None:
        """Send what is buffered for one job: gaps first, then one logs and one metrics frame per learner.

        Callers hold `send_lock`, so two flushes never interleave their frames of one learner."""
        if not sub.ready:
            return
        for learner, stream in sorted(sub.streams.items()):
            gaps, lines, points = stream.take()
            for low, high in gaps:
                await self.send_json(
                    {"type": "gap", "job": job_id, "learner": learner, "from_seq": low, "to_seq": high}
                )
            if lines:
                await self.send_json({"type": "logs", "job": job_id, "learner": learner, "lines": lines})
            if points:
                await self.send_json({"type": "metrics", "job": job_id, "learner": learner, "points": points})
