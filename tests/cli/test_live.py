"""The WebSocket log follower (`trainyard.live`) against scripted frames and an in-memory REST API (httpx's
MockTransport): order, no repeats, `gap` and unannounced holes backfilled from REST, the final drain, the
quiet-spell status check, and the fall back to REST polling when the socket is refused. No server, no
database: the real server is covered by tests/cli/test_cli.py (daphne) and tests/tenants/test_ws_auth.py."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosedError
from websockets.frames import Close

from trainyard.client import Client, LogLine, TrainyardError
from trainyard.live import SKIP, LiveFollower, LiveUnavailable, ws_url

JOB = "j1"


class FakeServer:
    """GET jobs/j1/ and jobs/j1/logs/ from memory; `status` and `stored` may change as a test goes."""

    def __init__(self, learners: int = 1) -> None:
        self.status = "running"
        self.learners = learners
        self.stored: dict[int, list[int]] = {i: [] for i in range(learners)}
        self.requests: list[str] = []

    def store(self, learner: int, seqs: range) -> None:
        self.stored[learner].extend(seqs)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.url.path}?{request.url.query.decode()}")
        if request.url.path == f"/api/v1/jobs/{JOB}/":
            return httpx.Response(
                200, json={"id": JOB, "status": self.status, "resources": {"learners": self.learners}}
            )
        if request.url.path == f"/api/v1/jobs/{JOB}/logs/":
            params = request.url.params
            learner, after = int(params["learner"]), int(params.get("after", 0))
            seqs = [s for s in self.stored.get(learner, []) if s > after][: int(params.get("limit", 1000))]
            lines = [
                {
                    "learner": learner,
                    "attempt": 1,
                    "seq": s,
                    "ts": "2026-01-01T00:00:00Z",
                    "text": f"{learner}:{s}",
                }
                for s in seqs
            ]
            return httpx.Response(200, json={"lines": lines, "last_seq": seqs[-1] if seqs else None})
        return httpx.Response(404, json={"detail": "no such job"})


class FakeSocket:
    """Hands out scripted frames (an exception in the script is raised by `recv`); records what is sent."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.sent: list[dict[str, Any]] = []
        self.closed = False

    def __enter__(self) -> FakeSocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.closed = True

    def send(self, message: str) -> None:
        self.sent.append(json.loads(message))

    def recv(self, timeout: float | None = None) -> str:
        if not self.script:
            raise TimeoutError
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            item = item()
        return json.dumps(item)


def client(server: FakeServer, url: str = "http://ty.test") -> Client:
    return Client(url, "ty_x", transport=httpx.MockTransport(server.handle))


def logs(learner: int, *seqs: int) -> dict[str, Any]:
    return {"type": "logs", "job": JOB, "learner": learner, "lines": [[s, f"{learner}:{s}"] for s in seqs]}


def status(state: str) -> dict[str, Any]:
    return {"type": "status", "job": JOB, "status": state, "reason": "", "message": ""}


SUBSCRIBED = {
    "type": "subscribed",
    "job": JOB,
    "status": "running",
    "reason": "",
    "message": "",
    "learners": 1,
}


def follow(api: Client, sock: FakeSocket, cursors: dict[int, int] | None = None, **kw: Any) -> list[LogLine]:
    return list(LiveFollower(api, JOB, {} if cursors is None else cursors, connect=lambda: sock, **kw))


def test_lines_in_order_once_with_gaps_and_holes_backfilled_and_a_final_drain() -> None:
    server = FakeServer()
    server.store(0, range(1, 11))  # 9 and 10 are only stored, never sent: the final drain reads them
    sock = FakeSocket(
        [
            SUBSCRIBED,
            logs(0, 2, 1),  # out of order within a frame
            {"type": "gap", "job": JOB, "learner": 0, "from_seq": 3, "to_seq": 4},
            logs(0, 5),
            logs(0, 5, 6),  # 5 again: dropped
            logs(0, 8),  # 7 missing without a gap frame: read from REST first
            {"type": "metrics", "job": JOB, "learner": 0, "points": [["loss", 1, 0.5, 8]]},
            {"type": "logs", "job": "other", "learner": 0, "lines": [[99, "not ours"]]},
            status("succeeded"),
            logs(0, 50),  # never read: the job is final
        ]
    )
    lines = follow(client(server), sock, cursors={0: 0})
    assert [line["seq"] for line in lines] == list(range(1, 11))
    assert [line["text"] for line in lines][:3] == ["0:1", "0:2", "0:3"]
    assert lines[0]["attempt"] is None and lines[2]["attempt"] == 1  # frame vs REST
    assert sock.sent == [{"action": "subscribe", "job": JOB, "after": {"0": 0}}]
    assert sock.closed


def test_resumes_after_the_cursors_and_skips_other_learners_when_one_is_asked() -> None:
    server = FakeServer(learners=3)
    server.store(1, range(1, 6))
    server.status = "failed"
    sock = FakeSocket([{**SUBSCRIBED, "status": "failed"}])
    lines = follow(client(server), sock, cursors={1: 3}, learner=1)
    assert [(line["learner"], line["seq"]) for line in lines] == [(1, 4), (1, 5)]
    assert sock.sent[0]["after"] == {"0": SKIP, "1": 3, "2": SKIP}


def test_exact_reads_each_live_frame_from_rest() -> None:
    server = FakeServer()
    server.store(0, range(1, 4))
    sock = FakeSocket([SUBSCRIBED, logs(0, 1, 2), logs(0, 3), status("cancelled")])
    lines = follow(client(server), sock, exact=True)
    assert [(line["seq"], line["attempt"], line["ts"]) for line in lines] == [
        (1, 1, "2026-01-01T00:00:00Z"),
        (2, 1, "2026-01-01T00:00:00Z"),
        (3, 1, "2026-01-01T00:00:00Z"),
    ]


def test_a_quiet_socket_asks_rest_whether_the_job_ended() -> None:
    server = FakeServer()
    server.store(0, range(1, 3))

    def ended() -> dict[str, Any]:
        server.status = "succeeded"  # the status frame was lost
        raise TimeoutError

    sock = FakeSocket([SUBSCRIBED, logs(0, 1), TimeoutError(), lambda: ended()])
    lines = follow(client(server), sock, quiet=0.01)
    assert [line["seq"] for line in lines] == [1, 2]


def test_not_found_is_an_api_error_and_other_errors_give_up_the_socket() -> None:
    server = FakeServer()
    with pytest.raises(TrainyardError) as caught:
        follow(client(server), FakeSocket([{"type": "error", "job": JOB, "error": "not found"}]))
    assert caught.value.status == 404
    with pytest.raises(LiveUnavailable):
        follow(client(server), FakeSocket([{"type": "error", "error": "unknown action"}]))
    refused = ConnectionClosedError(Close(4401, ""), None)
    with pytest.raises(LiveUnavailable, match="refused the token"):
        follow(client(server), FakeSocket([refused]))


def test_follow_logs_polls_rest_from_where_the_socket_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeServer()
    server.store(0, range(1, 6))
    refused = ConnectionClosedError(Close(4401, "bye"), None)
    sock = FakeSocket([SUBSCRIBED, logs(0, 1, 2), refused])
    monkeypatch.setattr("trainyard.live.open_socket", lambda url, token: sock)

    server.status = "succeeded"  # read by the poller; the socket said running
    lines = list(client(server).follow_logs(JOB, interval=0.01))
    assert [line["seq"] for line in lines] == [1, 2, 3, 4, 5]  # 1-2 live, 3-5 polled, none twice
    assert sock.closed


def test_a_dropped_socket_is_reopened_with_backoff_and_resumes_from_the_cursors() -> None:
    server = FakeServer()
    server.store(0, range(1, 9))
    failed = ConnectionClosedError(Close(4503, ""), None)  # the stream behind the socket failed
    reset = ConnectionResetError(104, "Connection reset by peer")
    sockets: list[FakeSocket | Exception] = [
        FakeSocket([SUBSCRIBED, logs(0, 1, 2), failed]),
        LiveUnavailable("cannot open ws://ty.test/ws/: [Errno 111] Connection refused"),  # server still down
        FakeSocket([reset]),  # opened, dropped before answering: the backoff goes on growing
        FakeSocket([SUBSCRIBED, logs(0, 3, 4, 5), logs(0, 5, 6), status("succeeded")]),
    ]
    opened: list[FakeSocket] = []

    def connect() -> FakeSocket:
        item = sockets.pop(0)
        if isinstance(item, Exception):
            raise item
        opened.append(item)
        return item

    pauses: list[float] = []
    follower = LiveFollower(client(server), JOB, {0: 0}, connect=connect, sleep=pauses.append)
    lines = list(follower)
    assert [line["seq"] for line in lines] == list(range(1, 9))  # 7-8 from the final drain; none twice
    assert [sock.sent for sock in opened] == [
        [{"action": "subscribe", "job": JOB, "after": {"0": 0}}],
        [{"action": "subscribe", "job": JOB, "after": {"0": 2}}],
        [{"action": "subscribe", "job": JOB, "after": {"0": 2}}],
    ]
    assert all(sock.closed for sock in opened)
    # 1 s (after a socket that had subscribed), then 2 s and 4 s while nothing answers; jittered by 25 %.
    assert [round(p / nominal, 2) for p, nominal in zip(pauses, [1, 2, 4], strict=True)] == [
        pytest.approx(1, abs=0.25)
    ] * 3


def test_no_websocket_endpoint_falls_back_to_polling() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = FakeServer()
    server.store(0, range(1, 4))
    server.status = "succeeded"
    lines = list(client(server, f"http://127.0.0.1:{port}").follow_logs(JOB, interval=0.01))
    assert [line["seq"] for line in lines] == [1, 2, 3]


def test_ws_url() -> None:
    assert ws_url("http://h:8000") == "ws://h:8000/ws/"
    assert ws_url("https://ty.example.com/prefix/") == "wss://ty.example.com/prefix/ws/"
