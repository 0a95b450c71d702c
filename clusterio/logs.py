"""Following a container's log exactly once: no line lost, none repeated, across follower restarts.

The API can only resume a log at a timestamp (`sinceTime`, one-second precision), so the position in
a log is a `LogCursor`: the timestamp of the last line consumed and how many lines carrying exactly
that timestamp were consumed. On (re)connect the stream replays from the cursor's second; lines
before the cursor, and the first `seen_at_ts` lines at its timestamp, are skipped. The caller stores
each batch together with the cursor after it, so a restarted follower resumes exactly.

`Stream` (a streaming HTTP response any thread can cut) also lives here; the reflector uses it too.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import urllib3

from clusterio.errors import BadRequest, ClusterError, NotFound, Unavailable

if TYPE_CHECKING:
    from clusterio.client import Cluster

log = logging.getLogger(__name__)

_TIMESTAMP_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
_EOF = object()
_POLL = 0.1
TERMINAL_PHASES = ("Succeeded", "Failed")


class Stream:
    """A streaming response (a watch or a followed log) that any thread can cut with `close`.

    Reading a cut stream ends the iteration quietly; a broken one raises `Unavailable`, so the
    caller reconnects from what it has already consumed.
    """

    def __init__(self, response: Any) -> None:
        self._response = response
        self._closed = threading.Event()

    def chunks(self, size: int = 65536) -> Iterator[bytes]:
        """Yield the body as it arrives, in pieces of at most `size` bytes."""
        try:
            for chunk in self._response.stream(size, decode_content=True):
                if chunk:
                    yield chunk
        except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError) as exc:
            if not self._closed.is_set():
                raise Unavailable(f"stream broken: {type(exc).__name__}: {exc}") from exc

    def lines(self) -> Iterator[bytes]:
        """Yield complete lines without their b"\\n"; a partial last line (a cut stream) is dropped."""
        parts: list[bytes] = []
        for chunk in self.chunks():
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                parts.append(chunk[start:end])
                yield b"".join(parts)
                parts = []
                start = end + 1
            if start < len(chunk):
                parts.append(chunk[start:])

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Cut the stream: unblocks a reader in another thread; the connection is not reused."""
        self._closed.set()
        for method in ("shutdown", "close", "release_conn"):
            with contextlib.suppress(Exception):
                getattr(self._response, method)()

    @contextlib.contextmanager
    def closing_on(self, stop: threading.Event) -> Iterator[Stream]:
        """Close the stream as soon as `stop` is set (and on exit), so a blocked read returns promptly."""
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                if stop.wait(_POLL):
                    self.close()
                    return

        watcher = threading.Thread(target=watch, name="clusterio-stream-stop", daemon=True)
        watcher.start()
        try:
            yield self
        finally:
            done.set()
            self.close()


@dataclass(frozen=True)
class LogRecord:
    """One log line with the runtime's timestamp (UTC, microsecond precision); `text` has no newline."""

    ts: datetime
    text: str


@dataclass(frozen=True)
class LogCursor:
    """Where a follower stands: the last timestamp consumed and how many lines at exactly it were consumed.

    `LogCursor(None, 0)` is the start of the log.
    """

    ts: datetime | None
    seen_at_ts: int = 0


def parse_timestamp(text: str) -> datetime:
    """Parse an RFC 3339 timestamp (nanoseconds allowed, cut to microseconds) into an aware UTC datetime."""
    match = _TIMESTAMP_RE.match(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    base = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S")
    micros = int((match[2] or "0")[:6].ljust(6, "0"))
    zone = match[3]
    if zone == "Z":
        tz = UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    return base.replace(microsecond=micros, tzinfo=tz).astimezone(UTC)


def parse_line(raw: bytes) -> LogRecord:
    """Split one `timestamps=true` log line into its timestamp and text (invalid UTF-8 replaced)."""
    stamp, _, text = raw.partition(b" ")
    return LogRecord(parse_timestamp(stamp.decode("ascii", "replace")), text.decode("utf-8", "replace"))


class LogPosition:
    """Decides, line by line, what a stream opened at `cursor` has not delivered yet, and tracks the cursor.

    While the stream replays (lines up to the cursor), older lines and the first `seen_at_ts` lines at
    the cursor's timestamp are refused. After the first new line everything is new, even a line whose
    timestamp went backwards (the cursor then stays at the latest timestamp, so a restart skips it again).
    """

    def __init__(self, cursor: LogCursor) -> None:
        self.ts = cursor.ts
        self.seen = cursor.seen_at_ts
        self._to_skip = cursor.seen_at_ts if cursor.ts is not None else 0
        self._replaying = cursor.ts is not None

    def accept(self, ts: datetime) -> bool:
        """Tell whether the line stamped `ts` is new; when it is, move the cursor past it."""
        if self._replaying and self.ts is not None:
            if ts < self.ts:
                return False
            if ts == self.ts and self._to_skip > 0:
                self._to_skip -= 1
                return False
            self._replaying = False
        if self.ts is None or ts > self.ts:
            self.ts, self.seen = ts, 1
        elif ts == self.ts:
            self.seen += 1
        return True

    def cursor(self) -> LogCursor:
        """The cursor after every line accepted so far."""
        return LogCursor(self.ts, self.seen)


class LogFollower:
    """Follows one container's log from a cursor: no line lost, none repeated, across follower restarts.

    `on_batch(records, cursor_after)` is called with at most `batch_lines` records, at most
    `batch_seconds` after the first of them arrived; the caller should store both in one transaction.
    If `on_batch` raises, `run` stops and re-raises without moving past that batch, so the caller
    resumes from the cursor it stored last. A stream idle for `idle_timeout` seconds is reopened.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        namespace: str,
        pod: str,
        container: str = "learner",
        cursor: LogCursor | None = None,
        on_batch: Callable[[list[LogRecord], LogCursor], None],
        batch_lines: int = 500,
        batch_seconds: float = 0.25,
        idle_timeout: float = 60.0,
        backoff_max: float = 5.0,
    ) -> None:
        if batch_lines < 1:
            raise ValueError("batch_lines must be at least 1")
        self.cluster = cluster
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.cursor = cursor or LogCursor(None, 0)
        self.on_batch = on_batch
        self.batch_lines = batch_lines
        self.batch_seconds = batch_seconds
        self.idle_timeout = idle_timeout
        self.backoff_max = backoff_max
        self.connections = 0

    def run(self, stop: threading.Event) -> LogCursor:
        """Deliver the log until the container has ended and the stream is drained, the pod is gone,
        or `stop` is set; returns the cursor after the last delivered batch."""
        failures = 0
        while not stop.is_set():
            try:
                stream = self.cluster.follow_log(
                    namespace=self.namespace,
                    pod=self.pod,
                    container=self.container,
                    since=self.cursor.ts,
                    read_timeout=self.idle_timeout,
                )
            except NotFound:
                return self.cursor
            except (BadRequest, Unavailable) as exc:
                if self._finished(drained=isinstance(exc, BadRequest)):
                    return self.cursor
                log.debug("log of %s/%s not readable yet: %s", self.namespace, self.pod, exc)
            else:
                self.connections += 1
                ended_cleanly, delivered = self._pump(stream, stop)
                if stop.is_set() or self._finished(drained=ended_cleanly):
                    return self.cursor
                if delivered:
                    failures = 0
                    continue
            delay = min(self.backoff_max, 0.1 * 2**failures) * random.uniform(0.5, 1.0)
            failures += 1
            stop.wait(delay)
        return self.cursor

    def _finished(self, *, drained: bool) -> bool:
        """Tell whether there is nothing more to read: the pod is gone, or `drained` (the stream ended
        cleanly, or the log could not be opened) and the container has terminated or the pod ended."""
        try:
            pod = self.cluster.get_pod(namespace=self.namespace, pod=self.pod)
        except ClusterError:
            return False
        if pod is None:
            return True
        if not drained:
            return False
        status = pod.get("status") or {}
        if status.get("phase") in TERMINAL_PHASES:
            return True
        return any(
            c.get("name") == self.container and "terminated" in (c.get("state") or {})
            for c in status.get("containerStatuses") or []
        )

    def _pump(self, stream: Stream, stop: threading.Event) -> tuple[bool, bool]:
        """Read one connection to its end; returns (ended cleanly, delivered anything)."""
        lines: queue.Queue[Any] = queue.Queue(maxsize=4 * self.batch_lines)
        reader = threading.Thread(
            target=_read_into, args=(stream, lines), name=f"log-{self.pod}", daemon=True
        )
        reader.start()
        position = LogPosition(self.cursor)
        pending: list[LogRecord] = []
        first_at = 0.0
        delivered = False
        try:
            while not stop.is_set():
                wait = _POLL if not pending else max(0.0, first_at + self.batch_seconds - time.monotonic())
                try:
                    item = lines.get(timeout=min(wait, _POLL))
                except queue.Empty:
                    item = None
                if isinstance(item, bytes):
                    try:
                        record = parse_line(item)
                    except ValueError:
                        log.warning("unparseable log line of %s/%s: %r", self.namespace, self.pod, item[:200])
                    else:
                        if position.accept(record.ts):
                            if not pending:
                                first_at = time.monotonic()
                            pending.append(record)
                elif item is _EOF or isinstance(item, ClusterError):
                    if isinstance(item, ClusterError):
                        log.info("log stream of %s/%s broke: %s", self.namespace, self.pod, item)
                    delivered |= self._deliver(pending, position)
                    return item is _EOF, delivered
                if pending and (
                    len(pending) >= self.batch_lines or time.monotonic() - first_at >= self.batch_seconds
                ):
                    delivered |= self._deliver(pending, position)
            delivered |= self._deliver(pending, position)
            return False, delivered
        finally:
            stream.close()

    def _deliver(self, pending: list[LogRecord], position: LogPosition) -> bool:
        if not pending:
            return False
        records = list(pending)
        pending.clear()
        cursor = position.cursor()
        self.on_batch(records, cursor)
        self.cursor = cursor
        return True


def _read_into(stream: Stream, lines: queue.Queue[Any]) -> None:
    """Reader thread: move complete lines into `lines`, then _EOF or the error that ended the stream."""

    def offer(item: Any) -> bool:
        while True:
            try:
                lines.put(item, timeout=_POLL)
                return True
            except queue.Full:
                if stream.closed:
                    return False

    try:
        for line in stream.lines():
            if not offer(line):
                return
    except ClusterError as exc:
        offer(exc)
        return
    offer(_EOF)
