"""One reader per job per process: what `jobs.streams` publishes to a job's group is read once from the
channel layer and handed to every socket of this process that follows the job, each frame encoded once.

Before, every socket joined the job's group with a channel of its own: the layer wrote each message once per
viewer, and each socket decoded, sorted and encoded the same lines again, so 50 viewers of a busy job cost
50 times one viewer and fell behind together (docs/streaming.md, *Fan-out*). Now the process joins the group
once per job (`JobFeed`, shared through `feeds()`), its reader coalesces the lines that arrive into one batch
per learner at most every FLUSH_INTERVAL, and each batch carries its `logs` and `metrics` frames as JSON text,
encoded the first time a socket asks for them: a socket that is in step with the feed sends that same text.

A feed lives while one socket of the process follows its job; it is bound to the event loop that made it.
Should its reader fail (the layer's connection lost), every socket following it is told (`Viewer.feed_failed`)
and closes for its client to reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from channels.layers import BaseChannelLayer

from jobs.streams import job_group

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.1
BUFFER_LINES = 5000
"""At most this many lines per learner wait in a feed between flushes; beyond, the oldest are dropped (the
sockets announce them as a `gap`), so a frame never holds more."""
GROUP_REFRESH_SECONDS = 3600.0
"""How often a feed renews its group membership (the layer forgets it after `group_expiry`, a day)."""

Line = list[Any]  # [seq, text]
Point = list[Any]  # [name, step, value, log_seq]


@dataclass
class Batch:
    """New lines of one learner of one job, in sequence order, each once; and the metric points of those lines.

    The frames are encoded on first use and then shared by every socket that sends them unchanged."""

    job: str
    learner: int
    lines: list[Line]
    points: list[Point]
    _logs: str | None = field(default=None, repr=False)
    _metrics: str | None = field(default=None, repr=False)

    @property
    def first(self) -> int:
        return int(self.lines[0][0])

    @property
    def last(self) -> int:
        return int(self.lines[-1][0])

    def logs_text(self) -> str:
        if self._logs is None:
            frame = {"type": "logs", "job": self.job, "learner": self.learner, "lines": self.lines}
            self._logs = json.dumps(frame)
        return self._logs

    def metrics_text(self) -> str | None:
        if not self.points:
            return None
        if self._metrics is None:
            frame = {"type": "metrics", "job": self.job, "learner": self.learner, "points": self.points}
            self._metrics = json.dumps(frame)
        return self._metrics


class Viewer(Protocol):
    """What a feed needs of a socket that follows its job (jobs.consumers.LiveConsumer)."""

    def feed_batch(self, batch: Batch) -> None: ...

    def feed_message(self, job_id: str, payload: dict[str, Any]) -> None: ...

    def feed_failed(self, job_id: str, error: BaseException) -> None: ...


@dataclass
class _Pending:
    lines: dict[int, Line] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    evicted_to: int = 0


class JobFeed:
    """One job's live messages in this process: one layer channel in the job's group, one reader, and the
    sockets that follow the job. Lines are gathered per learner and handed out at most every FLUSH_INTERVAL
    (the first batch after a quiet spell at once); any other message first hands out the lines before it,
    so a job's last lines precede its `succeeded`."""

    def __init__(self, registry: FeedRegistry, layer: BaseChannelLayer, job_id: str) -> None:
        self.registry = registry
        self.layer = layer
        self.job_id = job_id
        self.viewers: set[Viewer] = set()
        self.channel = ""
        self.ready = asyncio.Event()
        self.failure: BaseException | None = None
        self.pending: dict[int, _Pending] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.last_flush = 0.0
        self.reads = 0  # messages read from the layer (one per published batch, whatever the viewer count)

    async def start(self) -> None:
        """Join the job's group with a channel of this feed's own and start reading it."""
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(job_group(self.job_id), self.channel)
            self.tasks = [
                asyncio.create_task(self._read(), name=f"live-feed-{self.job_id}"),
                asyncio.create_task(self._refresh(), name=f"live-feed-refresh-{self.job_id}"),
            ]
            for task in self.tasks:
                task.add_done_callback(self._task_ended)
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self.ready.set()

    async def _read(self) -> None:
        while True:
            message = await self.layer.receive(self.channel)
            self.reads += 1
            payload = message.get("payload") or {}
            try:
                if payload.get("kind") == "logs":
                    self._gather(payload)
                else:
                    self._flush()
                    for viewer in list(self.viewers):
                        viewer.feed_message(self.job_id, payload)
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring a malformed live message for job %s", self.job_id, exc_info=True)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(GROUP_REFRESH_SECONDS)
            await self.layer.group_add(job_group(self.job_id), self.channel)

    def _gather(self, payload: dict[str, Any]) -> None:
        pending = self.pending.setdefault(int(payload["learner"]), _Pending())
        for seq, text in payload.get("lines") or []:
            pending.lines[int(seq)] = [int(seq), text]
        pending.points.extend(list(point) for point in payload.get("metrics") or [])
        while (
            len(pending.lines) > BUFFER_LINES
        ):  # in arrival order, which is sequence order but for a rare race
            pending.evicted_to = max(pending.evicted_to, pending.lines.pop(next(iter(pending.lines)))[0])
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.create_task(self._flush_soon(), name=f"live-feed-flush-{self.job_id}")

    async def _flush_soon(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.last_flush + FLUSH_INTERVAL - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        self._flush()

    def _flush(self) -> None:
        """Hand every gathered line out, one batch per learner, to every viewer."""
        if not self.pending:
            return
        self.last_flush = asyncio.get_running_loop().time()
        pending, self.pending = self.pending, {}
        for learner, gathered in sorted(pending.items()):
            if not gathered.lines:
                continue
            lines = [gathered.lines[seq] for seq in sorted(gathered.lines)]
            kept = {int(line[0]) for line in lines}
            points = sorted((p for p in gathered.points if int(p[3]) in kept), key=lambda p: int(p[3]))
            batch = Batch(self.job_id, learner, lines, points)
            for viewer in list(self.viewers):
                viewer.feed_batch(batch)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        assert error is not None
        log.error("live feed of job %s failed", self.job_id, exc_info=error)
        self.registry.forget(self)
        self.stop()
        for viewer in list(self.viewers):
            viewer.feed_failed(self.job_id, error)
        self.viewers.clear()

    def stop(self) -> None:
        for task in [*self.tasks, self.flusher]:
            if task is not None and task is not asyncio.current_task():
                task.cancel()


PAGES_KEPT = 64
PAGE_SECONDS = 60.0


class FeedRegistry:
    """The feeds of one event loop, by job id; and the backlog pages read lately, shared by the sockets that
    subscribe to a job at about the same time (50 viewers opening a job's page read its log once)."""

    def __init__(self) -> None:
        self.feeds: dict[str, JobFeed] = {}
        self.pages: OrderedDict[tuple[str, int, int], tuple[float, asyncio.Future[Batch | None]]] = (
            OrderedDict()
        )

    async def backlog_page(
        self,
        job_id: str,
        learner: int,
        after: int,
        full: int,
        load: Callable[[], Awaitable[Batch | None]],
        since: float = math.inf,
    ) -> Batch | None:
        """A learner's stored lines after `after` (a page of at most `full` lines), read by `load`, for a
        socket that joined the job's feed at `since` (the loop's time).

        A full page never changes (sequences are never reused, and a line's points are stored with it), so
        one is kept for PAGE_SECONDS (PAGES_KEPT at most) and a read under way is shared. A shorter page may
        grow: a socket gets one only from a read that began after it joined the feed, else it reads again
        itself, so its backlog is never older than its joining the feed (what is stored after that comes
        live). Its own read is shared in turn, so sockets subscribing together share the last page's reads
        too."""
        key = (job_id, learner, after)
        while True:
            now = asyncio.get_running_loop().time()
            found = self.pages.get(key)
            if found is None or now - found[0] >= PAGE_SECONDS:
                break
            self.pages.move_to_end(key)
            try:
                page = await asyncio.shield(found[1])
            except asyncio.CancelledError:
                if not found[1].cancelled():
                    raise  # this socket itself is going away
                continue  # the socket that was reading went away: another read, shared or its own
            if (page is not None and len(page.lines) >= full) or found[0] >= since:
                return page
            # A short page read from before this socket joined: a newer read (another socket's, begun
            # meanwhile, or its own) follows.
        future: asyncio.Future[Batch | None] = asyncio.get_running_loop().create_future()
        self.pages[key] = (now, future)
        while len(self.pages) > PAGES_KEPT:
            self.pages.popitem(last=False)
        try:
            page = await load()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved here: the sharers raise it themselves
            self._unkeep(key, future)
            raise
        future.set_result(page)
        if page is None or len(page.lines) < full:
            self._unkeep(key, future)
        return page

    def _unkeep(self, key: tuple[str, int, int], future: asyncio.Future[Batch | None]) -> None:
        if key in self.pages and self.pages[key][1] is future:
            del self.pages[key]

    async def follow(self, layer: BaseChannelLayer, job_id: str, viewer: Viewer) -> JobFeed:
        """Add `viewer` to the job's feed, starting the feed (one group join) if none runs yet."""
        feed = self.feeds.get(job_id)
        if feed is None:
            feed = self.feeds[job_id] = JobFeed(self, layer, job_id)
            feed.viewers.add(viewer)
            try:
                await feed.start()
            except BaseException:
                self.forget(feed)
                raise
            if viewer not in feed.viewers:  # it left while the feed started
                await self.unfollow(job_id, viewer)
            return feed
        feed.viewers.add(viewer)
        await feed.ready.wait()
        if feed.failure is not None:
            feed.viewers.discard(viewer)
            raise feed.failure
        return feed

    async def unfollow(self, job_id: str, viewer: Viewer) -> None:
        """Remove `viewer`; the last one out stops the feed and leaves the group."""
        feed = self.feeds.get(job_id)
        if feed is None:
            return
        feed.viewers.discard(viewer)
        if feed.viewers or not feed.ready.is_set():
            return
        self.forget(feed)
        feed.stop()
        if feed.channel:
            with contextlib.suppress(Exception):  # the group expires by itself
                await feed.layer.group_discard(job_group(job_id), feed.channel)

    def drop(self, job_id: str, viewer: Viewer) -> None:
        """`unfollow` without waiting (a consumer cancelled mid-way): the group membership just expires."""
        feed = self.feeds.get(job_id)
        if feed is not None:
            feed.viewers.discard(viewer)
            if not feed.viewers and feed.ready.is_set():
                self.forget(feed)
                feed.stop()

    def forget(self, feed: JobFeed) -> None:
        if self.feeds.get(feed.job_id) is feed:
            del self.feeds[feed.job_id]


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FeedRegistry] = weakref.WeakKeyDictionary()


def feeds() -> FeedRegistry:
    """The feeds of the running event loop (one per process under a server; one per test loop in tests)."""
    loop = asyncio.get_running_loop()
    registry = _registries.get(loop)
    if registry is None:
        registry = _registries[loop] = FeedRegistry()
    return registry
