"""Many sockets connecting at once: what one connect + subscribe costs the database, and the sharing of a
job's last backlog page between sockets subscribing together (bench/stream_bench.py's connect storm)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.backends.signals import connection_created
from django.test import override_settings

from common.livereads import live_read, live_reads_close
from jobs import livefeed
from jobs.livefeed import Batch
from jobs.models import Job
from tenants.models import Tenant
from tests.jobs.test_consumer_fanout import viewer
from tests.jobs.test_consumers import run, setup, store

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["setup"]


class Counter:
    """Queries run and connections opened by the live-db threads."""

    def __init__(self) -> None:
        self.queries = 0
        self.connections = 0
        self.lock = threading.Lock()

    def query(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        with self.lock:
            self.queries += 1
        return execute(sql, params, many, context)

    def opened(self, **kwargs: Any) -> None:
        if threading.current_thread().name.startswith("live-db"):
            with self.lock:
                self.connections += 1

    def take(self) -> tuple[int, int]:
        with self.lock:
            taken = (self.queries, self.connections)
            self.queries = self.connections = 0
        return taken


@pytest.fixture
def kept_connections() -> Iterator[Counter]:
    """One live-db thread that keeps its connection (as in production), its queries counted; closed after."""
    counter = Counter()
    live_reads_close()
    with override_settings(LIVE_DB_THREADS=1, LIVE_DB_CONN_MAX_AGE=60):
        connection_created.connect(counter.opened)

        def install() -> None:
            connection.execute_wrappers.append(counter.query)  # the thread's wrapper outlives reconnects

        async def installed() -> None:
            await live_read(install)

        try:
            run(installed)
            yield counter
        finally:
            connection_created.disconnect(counter.opened)
            live_reads_close()


def test_a_connect_and_subscribe_costs_the_same_queries_and_no_new_connection_however_many_came_before(
    setup: tuple[Tenant, User, Job], kept_connections: Counter
) -> None:
    _, user, job = setup
    store(job, [f"l{i}" for i in range(1, 11)])
    costs: list[tuple[int, int]] = []

    async def scenario() -> None:
        comms = []
        for _ in range(4):
            kept_connections.take()
            # The handshake (session, user), then a subscribe (job, learners, backlog).
            comm = await viewer(user, job)
            frame = await comm.receive_json_from(timeout=10)
            assert frame["type"] == "logs" and frame["lines"][-1][0] == 10
            costs.append(kept_connections.take())
            comms.append(comm)
        for comm in comms:
            await comm.disconnect()

    run(scenario)
    queries = [q for q, _ in costs]
    # One connection at most, for the first socket; none after. The same queries for each later socket,
    # a handful: session, user, the job (scoped), its learners, the backlog page and its points.
    assert [c for _, c in costs[1:]] == [0, 0, 0] and costs[0][1] <= 1
    assert queries[1] == queries[2] == queries[3] <= queries[0] and queries[1] <= 8, costs


def test_a_short_backlog_page_is_shared_only_with_sockets_that_joined_before_its_read_began() -> None:
    async def scenario() -> None:
        registry = livefeed.FeedRegistry()
        key = ("j", 0, 0)
        reads: list[str] = []
        gates = {"first": asyncio.Event(), "late": asyncio.Event()}

        async def load(name: str) -> Batch:
            reads.append(name)
            if name in gates:
                await gates[name].wait()
            return Batch("j", 0, [[1, "a"], [2, "b"]], [])  # a short page: it may still grow

        def page(name: str, since: float) -> asyncio.Task[Batch | None]:
            return asyncio.create_task(registry.backlog_page("j", 0, 0, 1000, partial(load, name), since))

        joined = asyncio.get_running_loop().time()
        first = page("first", joined)
        while key not in registry.pages:
            await asyncio.sleep(0)
        began = registry.pages[key][0]
        sharer = page("sharer", began)  # joined before the read began: what it reads is new enough
        late = page("late", began + 1)  # joined after: that read may miss lines stored meanwhile
        await asyncio.sleep(0)
        gates["first"].set()
        assert (await first) is not None and (await sharer) is (await first)
        while "late" not in reads:  # the late socket's own read has begun
            await asyncio.sleep(0)
        assert reads == ["first", "late"]
        later = page("later", registry.pages[key][0])  # joined before the late socket's own read began
        await asyncio.sleep(0)
        gates["late"].set()
        assert (await later) is (await late) and (await late) is not (await first)
        assert reads == ["first", "late"]
        assert key not in registry.pages  # a short page is not kept once read

    asyncio.run(scenario())
