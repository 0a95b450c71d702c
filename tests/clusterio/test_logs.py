"""`LogFollower`: every line exactly once and in order, across restarts, against kubesim and a scripted
stream (equal timestamps, chunk boundaries inside lines and characters, invalid UTF-8)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from clusterio.client import Cluster
from clusterio.logs import LogCursor, LogFollower, LogPosition, LogRecord, Stream, parse_timestamp
from tests.clusterio.conftest import Gate, job_spec, pod_phase, python, wait_file_code, wait_for

N = 2000


class Collector:
    """An `on_batch` that keeps every record and the cursor it was given, and can stop after `stop_after`."""

    def __init__(self, stop: threading.Event | None = None, stop_after: int | None = None) -> None:
        self.records: list[LogRecord] = []
        self.cursors: list[LogCursor] = []
        self.stop = stop
        self.stop_after = stop_after

    def __call__(self, records: list[LogRecord], cursor: LogCursor) -> None:
        self.records.extend(records)
        self.cursors.append(cursor)
        if self.stop is not None and self.stop_after is not None and len(self.records) >= self.stop_after:
            self.stop.set()

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.records]


def follow(cluster: Cluster, ns: str, pod: str, cursor: LogCursor | None = None, **options: Any) -> Collector:
    stop = options.pop("stop", threading.Event())
    collector = options.pop("collector", None) or Collector()
    follower = LogFollower(cluster, namespace=ns, pod=pod, cursor=cursor, on_batch=collector, **options)
    returned = follower.run(stop)
    assert returned == (collector.cursors[-1] if collector.cursors else (cursor or LogCursor(None, 0)))
    return collector


def numbers(collector: Collector) -> list[int]:
    return [int(text) for text in collector.texts]


def counting(first: int, last: int) -> str:
    return f"for i in range({first}, {last + 1}): print(i)\n"


# -- against kubesim ------------------------------------------------------------------------------


def test_follows_2000_numbered_lines_exactly_once_and_in_order(
    cluster: Cluster, ns: str, job_id: str
) -> None:
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(counting(1, N))))
    collector = follow(cluster, ns, pod, batch_lines=300)
    assert numbers(collector) == list(range(1, N + 1))
    assert max(len(batch) for batch in _batches(collector)) <= 300
    assert pod_phase(cluster, ns, pod) == "Succeeded"


def _batches(collector: Collector) -> Iterator[list[LogRecord]]:
    seen = 0
    for cursor in collector.cursors:
        size = next(i for i in range(seen, len(collector.records) + 1) if _cursor_at(collector, i) == cursor)
        yield collector.records[seen:size]
        seen = size


def _cursor_at(collector: Collector, end: int) -> LogCursor:
    position = LogPosition(LogCursor(None, 0))
    for record in collector.records[:end]:
        position.accept(record.ts)
    return position.cursor()


@pytest.mark.kubesim_only  # the gate is a hostPath folder the test writes on the node: kubesim's, on this host
def test_a_follower_stopped_halfway_and_restarted_from_its_cursor_misses_and_repeats_nothing(
    cluster: Cluster, ns: str, job_id: str, gate: Gate
) -> None:
    code = counting(1, N // 2) + gate.wait_code("half") + counting(N // 2 + 1, N)
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(code), volumes=[gate.volume]))
    stop = threading.Event()
    first = follow(cluster, ns, pod, batch_lines=100, stop=stop, collector=Collector(stop, stop_after=N // 4))
    assert numbers(first) == list(range(1, len(first.records) + 1))
    assert N // 4 <= len(first.records) < N

    gate.open("half")
    second = follow(cluster, ns, pod, cursor=first.cursors[-1], batch_lines=100)
    assert numbers(first) + numbers(second) == list(range(1, N + 1))


def test_a_cursor_at_any_line_resumes_right_after_it_even_among_equal_timestamps(
    cluster: Cluster, ns: str, job_id: str
) -> None:
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(counting(1, 300))))
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Succeeded")
    everything = follow(cluster, ns, pod).records
    for k in (0, 1, 137, 298, 299):
        ts = everything[k].ts
        cursor = LogCursor(ts, sum(1 for r in everything[: k + 1] if r.ts == ts))
        assert follow(cluster, ns, pod, cursor=cursor).records == everything[k + 1 :]


def test_a_follower_started_after_the_pod_finished_still_gets_everything(
    cluster: Cluster, ns: str, job_id: str
) -> None:
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(counting(1, N))))
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Succeeded")
    assert numbers(follow(cluster, ns, pod)) == list(range(1, N + 1))
    assert follow(cluster, ns, pod, cursor=LogCursor(datetime.now(UTC), 0)).records == []


def test_long_lines_and_invalid_utf8_arrive_whole_and_replaced(
    cluster: Cluster, ns: str, job_id: str
) -> None:
    code = (
        "import sys\n"
        "sys.stdout.buffer.write(b'x' * 200000 + b'\\n')\n"
        "sys.stdout.buffer.write(b'bad \\xff\\xfe end\\n')\n"
    )
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(code)))
    texts = follow(cluster, ns, pod).texts
    assert texts == ["x" * 200000, "bad \ufffd\ufffd end"]


def test_a_pod_that_is_gone_ends_the_follow(cluster: Cluster, ns: str) -> None:
    assert follow(cluster, ns, "no-such-pod").records == []


def test_stop_ends_a_follow_of_a_silent_running_pod(
    cluster: Cluster, ns: str, job_id: str, tmp_path: Path
) -> None:
    [pod] = cluster.launch(
        spec=job_spec(ns, job_id, python("print('up')\n" + wait_file_code(tmp_path / "x")))
    )
    stop = threading.Event()
    collector = Collector(stop, stop_after=1)
    follower = LogFollower(cluster, namespace=ns, pod=pod, on_batch=collector)
    thread = threading.Thread(target=follower.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert collector.texts == ["up"]


# -- against a scripted stream --------------------------------------------------------------------

T0 = datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def _stamp(ts: datetime) -> bytes:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%f").encode() + b"789Z"


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        pass


class ScriptedCluster:
    """Serves a fixed, finished log the way the API does: `sinceTime` at whole seconds, in tiny chunks."""

    def __init__(self, lines: list[tuple[datetime, bytes]], chunk: int = 3) -> None:
        self.lines = lines
        self.chunk = chunk
        self.opened: list[datetime | None] = []

    def follow_log(self, *, since: datetime | None, **_: Any) -> Stream:
        self.opened.append(since)
        floor = since.replace(microsecond=0) if since else None
        body = b"".join(
            _stamp(ts) + b" " + text + b"\n" for ts, text in self.lines if not floor or ts >= floor
        )
        return Stream(_Response([body[i : i + self.chunk] for i in range(0, len(body), self.chunk)]))

    def get_pod(self, **_: Any) -> dict[str, Any]:
        return {"status": {"phase": "Succeeded"}}


def _scripted(
    lines: list[tuple[datetime, bytes]], cursor: LogCursor | None = None, **options: Any
) -> Collector:
    return follow(cast(Cluster, ScriptedCluster(lines)), "ns", "pod", cursor=cursor, **options)


EQUAL_TIMESTAMPS = [
    (T0, b"a"),
    (T0, b"b"),
    (T0, b"c"),
    (T0 + timedelta(microseconds=1), b"d"),
    (T0 + timedelta(microseconds=1), b"e"),
    (T0 + timedelta(seconds=1), b"f"),
]


@pytest.mark.parametrize("k", range(len(EQUAL_TIMESTAMPS) + 1))
def test_restarting_after_any_line_among_equal_timestamps_delivers_exactly_the_rest(k: int) -> None:
    stop = threading.Event()
    first = _scripted(
        EQUAL_TIMESTAMPS, batch_lines=1, stop=stop, collector=Collector(stop, stop_after=k or None)
    )
    if k:
        assert len(first.records) == k
        rest = _scripted(EQUAL_TIMESTAMPS, cursor=first.cursors[-1])
        assert first.texts + rest.texts == list("abcdef")
    else:
        assert first.texts == list("abcdef")
        assert first.cursors[-1] == LogCursor(T0 + timedelta(seconds=1), 1)


def test_cursor_counts_lines_at_its_timestamp() -> None:
    collector = _scripted(EQUAL_TIMESTAMPS[:5], batch_lines=2)
    assert [len(b) for b in _batches(collector)] == [2, 2, 1]
    assert collector.cursors == [
        LogCursor(T0, 2),
        LogCursor(T0 + timedelta(microseconds=1), 1),
        LogCursor(T0 + timedelta(microseconds=1), 2),
    ]


def test_chunks_that_split_lines_and_characters_still_give_whole_lines() -> None:
    lines = [(T0, "héllo wörld".encode()), (T0, b"broken \xff\xfe"), (T0, b""), (T0, b"last")]
    assert _scripted(lines).texts == ["héllo wörld", "broken \ufffd\ufffd", "", "last"]


def test_parse_timestamp_accepts_rfc3339_and_rfc3339nano() -> None:
    assert parse_timestamp("2030-01-02T03:04:05.123456789Z") == T0
    assert parse_timestamp("2030-01-02T03:04:05Z") == T0.replace(microsecond=0)
    assert parse_timestamp("2030-01-02T04:04:05.1234567+01:00") == T0
    with pytest.raises(ValueError):
        parse_timestamp("yesterday")
