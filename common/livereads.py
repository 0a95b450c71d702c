"""Database reads of the live WebSockets, in a few threads of their own that keep their connections.

Every read a socket makes (its session and user at the handshake, a job and its learners at a `subscribe`,
backlog pages, the periodic credentials check) runs here, not on the one thread-sensitive thread of the
process, so sockets connecting together read in parallel. With `CONN_MAX_AGE` 0 (web's setting: Django's
HTTP requests under ASGI run in a thread each, whose persistent connections would never be reused nor
closed) every read would open a PostgreSQL connection of its own, and a fresh backend also pays its first
touch of each table; for 50 sockets connecting at once that was most of the time to their first frame.

These threads are few (LIVE_DB_THREADS) and live as long as the process, so their connections are kept
between reads, as a persistent connection is: one is closed before a read when it is older than
LIVE_DB_CONN_MAX_AGE seconds or no longer answers, and after a read that met a database error. The reads
are plain reads: none opens a transaction, so nothing of one read's connection state outlives it (a
session whose password hash no longer matches is flushed by the handshake's lookup: one autocommitted
delete). LIVE_DB_CONN_MAX_AGE 0 closes the connection after every read (the test settings' default: a
test database is dropped at the end, which open connections would prevent).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import connection

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_opened = threading.local()  # per thread: when its connection was opened (time.monotonic())


def _pool() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=max(1, int(settings.LIVE_DB_THREADS)), thread_name_prefix="live-db"
            )
        return _executor


def _tidy() -> None:
    """Before a read: close this thread's connection when too old, or when it no longer answers."""
    if connection.connection is None:
        return
    max_age = float(settings.LIVE_DB_CONN_MAX_AGE)
    opened = getattr(_opened, "at", None)
    if opened is None or time.monotonic() - opened >= max_age or not connection.is_usable():
        connection.close()


def _run(func: Callable[..., T], *args: Any) -> T:
    """Run `func` in this live-db thread, keeping the connection afterwards unless told not to."""
    _tidy()
    fresh = connection.connection is None
    try:
        return func(*args)
    finally:
        if connection.connection is not None:
            if float(settings.LIVE_DB_CONN_MAX_AGE) <= 0 or connection.errors_occurred:
                connection.close()
            elif fresh:
                _opened.at = time.monotonic()


async def live_read(func: Callable[..., T], *args: Any) -> T:
    """Run a blocking read-only database function in a live-db thread (see the module's docstring)."""
    result: T = await SyncToAsync(_run, thread_sensitive=False, executor=_pool())(func, *args)
    return result


def live_reads_close() -> None:
    """Close every live-db thread's connection and stop the threads (the next read starts them again):
    for tests, which must leave no connection open on a test database."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is None:
        return
    workers = len(getattr(executor, "_threads", ())) or 1
    together = threading.Barrier(workers)

    def close() -> None:
        together.wait(timeout=10)  # one call per thread: each waits until all threads hold one
        connection.close()

    for future in [executor.submit(close) for _ in range(workers)]:
        future.result()
    executor.shutdown(wait=True)
