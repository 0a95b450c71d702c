"""Leader election (common/leader.py) against the test database: one holder at a time, a standby in as soon
as the holder goes, and a leader that can no longer prove its lock told so at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from common.leader import LeaderLock, leader_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def locks() -> Iterator[list[LeaderLock]]:
    """Leader locks on the test database, named apart from the platform's own; released at the end."""
    made: list[LeaderLock] = []
    yield made
    for lock in made:
        lock.release()


def make(locks: list[LeaderLock], who: str, *, lease: float = 3.0) -> LeaderLock:
    lock = LeaderLock("test-leader", lease_seconds=lease, retry_seconds=0.5)
    lock.identity = who  # two of them in one process: told apart by name
    locks.append(lock)
    return lock


def lost_event() -> tuple[threading.Event, list[str], Any]:
    event, reasons = threading.Event(), []

    def on_lost(reason: str) -> None:
        reasons.append(reason)
        event.set()

    return event, reasons, on_lost


def test_one_leads_the_other_stands_by_until_the_leader_releases(locks: list[LeaderLock]) -> None:
    first, second = make(locks, "first"), make(locks, "second")
    assert first.try_acquire() and first.leading
    assert not second.try_acquire() and not second.leading
    assert leader_of("test-leader") == "first"
    first.release()
    assert not first.leading
    assert second.acquire(threading.Event())
    assert leader_of("test-leader") == "second"
    second.release()
    # The server ends the session (and its locks) a moment after the client hung up.
    deadline = time.monotonic() + 30
    while leader_of("test-leader") is not None:
        assert time.monotonic() < deadline, "the released lock is still held"
        time.sleep(0.05)


def test_a_leader_whose_session_the_server_ends_is_told_and_a_standby_leads(locks: list[LeaderLock]) -> None:
    leader, standby = make(locks, "leader"), make(locks, "standby")
    assert leader.try_acquire()
    lost, reasons, on_lost = lost_event()
    leader.hold(on_lost)
    assert leader.conn is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [leader.conn.info.backend_pid])
    assert lost.wait(30), "the leader was not told that its lock went"
    assert not leader.leading
    assert "connection failed" in reasons[0], reasons
    assert standby.acquire(threading.Event())
    assert leader_of("test-leader") == "standby"
    assert len(reasons) == 1


def test_a_leader_whose_connection_hangs_steps_down_before_the_server_lets_a_standby_in(
    locks: list[LeaderLock],
) -> None:
    """The renewer stuck in a query that never answers (a dead network): the guard calls it lost after two
    thirds of the lease, while the server would keep the session for the whole lease."""
    leader = make(locks, "leader", lease=3.0)
    assert leader.try_acquire()
    real, answer = leader.conn, threading.Event()

    class Hanging:
        closed = False

        def execute(self, *args: Any) -> Any:
            answer.wait(60)
            raise psycopg.OperationalError("hung up")

        def close(self) -> None:
            answer.set()

    lost, reasons, on_lost = lost_event()
    leader.conn = Hanging()  # type: ignore[assignment]
    try:
        leader.hold(on_lost)
        assert lost.wait(30)
        assert reasons[0].startswith("the lock not proved for"), reasons
        assert not leader.leading
    finally:
        answer.set()
        assert real is not None
        real.close()


def test_the_locks_session_carries_the_lease_to_the_server(locks: list[LeaderLock]) -> None:
    """A leader that falls silent is ended by the server after the lease (idle_session_timeout), which lets a
    standby in even when no TCP reset ever arrives."""
    leader = make(locks, "leader", lease=4.0)
    assert leader.try_acquire()
    assert leader.conn is not None
    assert leader.conn.execute("SHOW idle_session_timeout").fetchone() == ("4s",)
    assert leader.conn.info.parameter_status("application_name") == "trainyard-test-leader leader"


def test_a_lease_shorter_than_three_retries_is_refused() -> None:
    with pytest.raises(ValueError, match="three retries"):
        LeaderLock("x", lease_seconds=1.0, retry_seconds=1.0)
