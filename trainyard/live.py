"""Following a job's log over the `/ws/` WebSocket (docs/streaming.md), with the REST API as backstop.

The socket is authenticated with the same bearer token as the REST calls (`Authorization` header; no
`Origin`, as a non-browser client). It is subscribed with `after` = the last sequence already printed per
learner, so nothing repeats; lines are printed per learner in sequence order, and any hole (a `gap` frame,
or lines that arrive after a missing range) is read from REST first. The follower stops when a `status`
frame, the `subscribed` answer, or (after a quiet spell) the job as read over REST says the job is final,
and then reads the REST log once more to its end (a last batch lost in the channel layer shows up there).

A socket that drops once it has worked (the server closes it with 4503 because the database or the channel
layer failed under it, a restart, a reset connection) is opened again with backoff (1 s doubling to 30 s,
from 1 s again once a subscription was answered) and resubscribed from the cursors, so nothing is lost or
repeated; while the server cannot be reached the follower keeps trying, as the browser does.

`LiveUnavailable` means the socket could not be used at all (no `websockets` package, no `/ws/` on this
server, a server that refuses tokens on the socket); the caller then polls REST from the same cursors, so
switching never loses or repeats a line.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from trainyard.client import STOPPED_STATES, LogLine, TrainyardError

if TYPE_CHECKING:
    from trainyard.client import Client

CLOSE_UNAUTHENTICATED = 4401
RETRY_FIRST, RETRY_MAX = 1.0, 30.0
"""Backoff between reconnects after a drop: doubling from RETRY_FIRST up to RETRY_MAX seconds."""
QUIET_SECONDS = 10.0
"""After this long without a frame, ask REST whether the job ended (a lost `status` frame)."""
MAX_FRAME = 64 * 1024 * 1024
SKIP = 2**62
"""An `after` that no sequence reaches: learners the caller does not want send nothing."""


class LiveUnavailable(Exception):
    """The WebSocket could not be used; follow over REST instead."""


class StreamDropped(LiveUnavailable):
    """A working socket closed (any code but 4401) or its server could not be reached: reconnect."""


class Socket(Protocol):
    """What the follower needs of a connection (websockets' sync client, or a test double)."""

    def send(self, message: str) -> None: ...

    def recv(self, timeout: float | None = None) -> str | bytes: ...

    def __enter__(self) -> Socket: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...


def ws_url(base_url: str) -> str:
    """The server's `/ws/` endpoint: `http(s)://host/prefix` becomes `ws(s)://host/prefix/ws/`."""
    if base_url.startswith("https://"):
        return "wss://" + base_url.removeprefix("https://").rstrip("/") + "/ws/"
    return "ws://" + base_url.removeprefix("http://").rstrip("/") + "/ws/"


def open_socket(base_url: str, token: str | None, timeout: float = 10.0) -> Socket:
    """A WebSocket to the server, bearer-authenticated; LiveUnavailable if it cannot be opened."""
    try:
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect
    except ImportError as exc:  # the package is optional: REST polling works without it
        raise LiveUnavailable("the websockets package is not installed") from exc
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return connect(
            ws_url(base_url),
            additional_headers=headers,
            user_agent_header="trainyard-cli",
            open_timeout=timeout,
            max_size=MAX_FRAME,
            compression=None,
        )
    except (OSError, TimeoutError, WebSocketException) as exc:
        raise LiveUnavailable(f"cannot open {ws_url(base_url)}: {exc}") from exc


class LiveFollower:
    """Yields one job's log lines from a WebSocket, each once and per learner in order.

    `cursors` (learner -> last sequence yielded) is read at the start and kept up to date, so a caller
    that falls back to REST after a LiveUnavailable goes on from where this stopped. With `exact`, the
    lines of each live frame are read from REST (so they carry `ts` and `attempt`, which the socket's
    `[seq, text]` pairs do not).
    """

    def __init__(
        self,
        api: Client,
        job_id: str,
        cursors: dict[int, int],
        *,
        learner: int | None = None,
        exact: bool = False,
        connect: Callable[[], Socket] | None = None,
        quiet: float = QUIET_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.job_id = job_id
        self.cursors = cursors
        self.learner = learner
        self.exact = exact
        self.connect = connect or (lambda: open_socket(api.base_url, api.token))
        self.quiet = quiet
        self.sleep = sleep
        self.final = False
        self.subscribed = False

    def __iter__(self) -> Iterator[LogLine]:
        delay, opened = RETRY_FIRST, False
        while not self.final:
            try:
                sock = self.connect()
            except LiveUnavailable:
                if not opened:
                    raise  # never worked: the caller polls REST instead
            else:
                opened = True
                self.subscribed = False
                # The socket is closed on leaving, also when the caller stops early (Ctrl-C); a drop reconnects.
                with sock, contextlib.suppress(StreamDropped):
                    yield from self._session(sock)
                if self.subscribed:
                    delay = RETRY_FIRST
            if not self.final:
                self.sleep(delay * random.uniform(0.75, 1.25))
                delay = min(delay * 2, RETRY_MAX)
        yield from self._backfill_all()

    def _subscribe_message(self, learners: int) -> str:
        after = {str(index): seq for index, seq in self.cursors.items()}
        if self.learner is not None:  # the others' lines would only be dropped here
            after = {str(i): SKIP for i in range(max(learners, self.learner + 1))} | {
                str(self.learner): self.cursors.get(self.learner, 0)
            }
        return json.dumps({"action": "subscribe", "job": self.job_id, "after": after})

    def _session(self, sock: Socket) -> Iterator[LogLine]:
        """Subscribe and yield until the job is final; LiveUnavailable if the socket fails first."""
        from websockets.exceptions import ConnectionClosed

        try:
            job = self.api.job(self.job_id)
        except TrainyardError as exc:
            if exc.unreachable or exc.status >= 500:  # the server is down or restarting: try again later
                raise StreamDropped(f"the server answered {exc.status or 'nothing'}") from exc
            raise
        learners = int((job.get("resources") or {}).get("learners") or 1)
        try:
            sock.send(self._subscribe_message(learners))
            while not self.final:
                try:
                    raw = sock.recv(timeout=self.quiet)
                except TimeoutError:
                    try:
                        self.final = self.api.job(self.job_id)["status"] in STOPPED_STATES
                    except TrainyardError as exc:
                        if not (exc.unreachable or exc.status >= 500):
                            raise
                    continue
                yield from self._handle(json.loads(raw))
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd else None
            if code == CLOSE_UNAUTHENTICATED:
                raise LiveUnavailable("the server refused the token on the socket") from exc
            raise StreamDropped(f"the socket closed ({code})") from exc
        except OSError as exc:
            raise StreamDropped(f"the connection failed: {exc}") from exc
        except ValueError as exc:
            raise LiveUnavailable(f"unreadable frame: {exc}") from exc

    def _handle(self, frame: Any) -> Iterator[LogLine]:
        if not isinstance(frame, dict) or frame.get("job") not in (None, self.job_id):
            return
        kind = frame.get("type")
        if kind == "error":
            if frame.get("error") == "not found":
                raise TrainyardError(404, "no such job", {"": ["no such job"]})
            raise LiveUnavailable(f"the server answered: {frame.get('error')}")
        if kind == "subscribed":
            self.subscribed = True
        if kind in ("subscribed", "status"):
            self.final = frame.get("status") in STOPPED_STATES
            return
        learner = frame.get("learner")
        if not isinstance(learner, int) or (self.learner is not None and learner != self.learner):
            return
        if kind == "gap":
            yield from self._backfill(learner, int(frame["to_seq"]))
        elif kind == "logs" and frame.get("lines"):
            lines = sorted((int(seq), str(text)) for seq, text in frame["lines"])
            if self.exact:
                yield from self._backfill(learner, lines[-1][0])
                return
            for seq, text in lines:
                if seq <= self.cursors.get(learner, 0):
                    continue
                if seq > self.cursors.get(learner, 0) + 1:  # a hole the server did not announce
                    yield from self._backfill(learner, seq - 1)
                self.cursors[learner] = seq
                yield LogLine(learner=learner, attempt=None, seq=seq, ts=None, text=text)

    def _backfill(self, learner: int, to_seq: int) -> Iterator[LogLine]:
        """Lines of a learner after its cursor up to `to_seq`, from REST."""
        while self.cursors.get(learner, 0) < to_seq:
            after = self.cursors.get(learner, 0)
            page = self.api.logs(self.job_id, learner=learner, after=after, limit=min(to_seq - after, 10000))
            fresh = [line for line in page["lines"] if after < line["seq"] <= to_seq]
            if not fresh:
                return  # not stored (yet): nothing to fill it with
            self.cursors[learner] = fresh[-1]["seq"]
            yield from fresh

    def _backfill_all(self) -> Iterator[LogLine]:
        """The job ended: read every learner's REST log after its cursor, to the end."""
        learners = [self.learner] if self.learner is not None else None
        yield from self.api.drain(self.job_id, self.cursors, learners=learners)
