"""The engine through an outage of both its stores at once, end to end: while jobs stream their logs, the
Kubernetes API server restarts (every watch and followed log cut, connections refused, watches from before
it answered 410) and every PostgreSQL session of the engine is killed. The watcher, its log followers and
the worker ride it out by themselves: every job ends as its learner did, with each line stored once.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from jobs import cluster
from jobs.models import Job, LogLine
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.clusters import pod_host
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.kubesim_only, pytest.mark.django_db(transaction=True)]

# A learner that prints numbered lines until its gate opens (a TCP port on this machine's loopback starts
# listening; pods reach it through the port kubesim exposes, whose forwarder closes a connection at once
# while nothing listens behind it), then 20 more, says how many and exits with `code`.
# The test decides when each learner ends without a clock.
GATED = """
import socket, sys, time

def gate_open():
    try:
        with socket.create_connection(("{host}", {port}), timeout=1) as conn:
            conn.settimeout(0.5)
            return conn.recv(1) != b""
    except TimeoutError:
        return True
    except OSError:
        return False

i = 0
while not gate_open():
    print(f"line {{i}}", flush=True)
    i += 1
    time.sleep(0.05)
for _ in range(20):
    print(f"line {{i}}", flush=True)
    i += 1
print(f"done after {{i}} lines", flush=True)
sys.exit({code})
"""


@pytest.fixture
def gates() -> Iterator[list[socket.socket]]:
    """Two closed gates: sockets bound to a loopback port (held, so nobody else takes it) that refuse
    connections until the test calls `listen()` on them."""
    sockets = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    yield sockets
    for sock in sockets:
        sock.close()


def gated(sim: KubeSim, name: str, gate: socket.socket, code: int) -> Job:
    tenant = make_tenant()
    port = gate.getsockname()[1]
    script = GATED.format(host=pod_host(sim, port), port=port, code=code)
    return job_submit(tenant=tenant, user=member(tenant), document=python_spec(name, script))


def stored(job: Job) -> list[tuple[int, str]]:
    return list(LogLine.objects.filter(job=job).order_by("seq").values_list("seq", "text"))


def assert_each_line_once(job: Job) -> None:
    """The learner's numbered lines 0..n-1 and its last word, stored in order, each exactly once."""
    lines = stored(job)
    assert lines and lines[-1][1].startswith("done after "), describe(job, logs=True)
    count = int(lines[-1][1].split()[2])
    expected = [(i + 1, f"line {i}") for i in range(count)] + [(count + 1, f"done after {count} lines")]
    assert lines == expected, f"job {job.pk}: {len(lines)} lines stored for {count + 1} printed"


def kill_other_database_sessions() -> int:
    """pg_terminate_backend on every session of the test database but this thread's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return len(cursor.fetchall())


def test_api_server_restart_and_database_sessions_killed_while_jobs_stream_lose_no_line_and_end_right(
    engine: KubeSim, gates: list[socket.socket]
) -> None:
    during, after = gates
    finishes_during = gated(engine, "ends-in-outage", during, 0)
    succeeds = gated(engine, "streams-through", after, 0)
    fails = gated(engine, "fails-after", after, 3)
    jobs = (finishes_during, succeeds, fails)
    for job in jobs:
        wait_status(job, "running")
    wait_until(lambda: all(len(stored(j)) >= 5 for j in jobs), what="every job's first lines stored")
    [pod] = cluster.job_pods(finishes_during)
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

    engine.stop_api_server()
    try:
        # One learner ends while nobody can see it: the watcher learns of it only after the outage.
        during.listen()

        def ended() -> bool:
            pod = engine.cluster.store.peek("pods", namespace, name) or {}
            return bool(pod.get("status", {}).get("phase") == "Succeeded")

        wait_until(ended, what="the learner to end during the outage")
        assert kill_other_database_sessions(), "there were engine sessions to end"
        lines_before = {j.pk: len(stored(j)) for j in jobs}
    finally:
        engine.start_api_server()

    # The two others streamed on through the outage: what they printed meanwhile is stored after it.
    def resumed() -> bool:
        return all(len(stored(job)) > lines_before[job.pk] + 10 for job in (succeeds, fails))

    wait_until(resumed, what="the streams to resume")
    after.listen()

    finished: dict[str, Any] = {}
    for job, status in ((finishes_during, "succeeded"), (succeeds, "succeeded"), (fails, "failed")):
        finished[job.pk] = wait_status(job, status, timeout=90, logs=True)
        assert finished[job.pk].attempt == 1, describe(job)
    assert finished[fails.pk].reason == "ExitCode3", describe(fails)
    for job in jobs:
        assert_each_line_once(job)
