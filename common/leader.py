"""Leader election for the processes of which only one may act at a time (the watcher and Celery beat): a
PostgreSQL session advisory lock, held on a connection of the lock's own for the leader's whole life.

Why a lock in PostgreSQL rather than a Kubernetes Lease: the platform already depends on PostgreSQL and on
nothing else of the kind (beat never talks to the cluster API), and the server itself ends the lock with the
session. A leader that dies (SIGKILL, OOM, a crash, its pod deleted) closes its TCP connection; the server
ends the session at once and a standby, which tries `pg_try_advisory_lock` every LEADER_RETRY_SECONDS, leads
within that time. A leader whose machine vanishes without closing anything is ended by the server's
`idle_session_timeout` (the leader pings every LEADER_RETRY_SECONDS, so only a silent one is ever idle that
long) and, before that, by TCP keepalives: a standby leads within LEADER_LEASE_SECONDS (plus a retry).

The other side of the bargain: a leader stops acting the moment it can no longer prove that it holds the lock.
A renewer thread checks every LEADER_RETRY_SECONDS, on the lock's connection, that the lock is still granted
to this session; a guard thread calls `on_lost` when the check failed or has not succeeded for two thirds of
the lease (the connection hangs), which is before the server can have let a standby in. The processes' `on_lost`
ends the process at once (`lost_exit`), as kube-scheduler does when it loses its Lease: nothing of the old
leader's threads goes on; Kubernetes (or deploy/local/respawn.py) starts it again, as a standby.

The lock's connection must reach PostgreSQL itself, or a pooler in session mode: a pooler in transaction mode
(PgBouncer's default) would hand the session, lock and all, to other clients.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connections

log = logging.getLogger(__name__)
# Options of Django's PostgreSQL backend that are not libpq connection parameters.
_DJANGO_OPTIONS = {"isolation_level", "pool", "assume_role", "server_side_binding"}


def lock_key(name: str) -> int:
    """The advisory lock's key for the leader of `name` ("watcher", "beat")."""
    return zlib.crc32(f"trainyard-leader:{name}".encode())


def identity() -> str:
    """Who this process is, as the lock's holder shows it: the host (in Kubernetes, the pod's name) and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def leader_of(name: str, *, alias: str = "default") -> str | None:
    """The identity of the process that leads `name` now, read from the server's locks (the truth, not a
    heartbeat); None when nobody does."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = 0 AND l.objid = %s AND l.objsubid = 1",
            [lock_key(name)],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    prefix = f"trainyard-{name} "
    return row[0][len(prefix) :] if row[0].startswith(prefix) else row[0]


def lost_exit(name: str) -> Callable[[str], None]:
    """An `on_lost` that ends the process at once (exit status 1), threads and all: a leader that cannot
    prove it leads must not write another row."""

    def exit_now(reason: str) -> None:
        log.critical("%s: leadership lost (%s); exiting so that it restarts as a standby", name, reason)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(1)

    return exit_now


class LeaderLock:
    """The lock that makes one process of `name` the leader, on a connection of its own.

    `acquire` (blocking) or `try_acquire` makes this process the leader; `hold` then starts the renewer and
    the guard; `release` (or the process's end) lets a standby in."""

    def __init__(
        self, name: str, *, lease_seconds: float, retry_seconds: float, alias: str = "default"
    ) -> None:
        if retry_seconds * 3 > lease_seconds:
            raise ValueError("the lease must be at least three retries long")
        self.name = name
        self.key = lock_key(name)
        self.identity = identity()
        self.lease_seconds = lease_seconds
        self.retry_seconds = retry_seconds
        self.renew_deadline = lease_seconds * 2 / 3
        self.alias = alias
        self.conn: psycopg.Connection[Any] | None = None
        self.renewed_at = 0.0
        self.held = False
        self.lost_reason: str | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lost_once = threading.Lock()

    # -- becoming the leader ------------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        settings = connections[self.alias].settings_dict
        params: dict[str, Any] = {
            key.lower(): settings[key] for key in ("USER", "PASSWORD", "HOST", "PORT") if settings.get(key)
        }
        params |= {k: v for k, v in (settings.get("OPTIONS") or {}).items() if k not in _DJANGO_OPTIONS}
        timeout = max(1, int(self.renew_deadline / 2))
        conn = psycopg.connect(
            dbname=settings["NAME"],
            autocommit=True,
            application_name=f"trainyard-{self.name} {self.identity}"[:63],
            connect_timeout=timeout,
            keepalives=1,
            keepalives_idle=timeout,
            keepalives_interval=1,
            keepalives_count=3,
            tcp_user_timeout=int(self.renew_deadline * 1000),
            **params,
        )
        # The server's side of the lease: it ends a session that has sent nothing for the lease (the leader
        # checks every retry), or whose peer stops answering keepalives; either way the lock goes with it.
        lease_ms = str(int(self.lease_seconds * 1000))
        conn.execute("SELECT set_config('idle_session_timeout', %s, false)", [lease_ms])
        for setting, value in (("idle", timeout), ("interval", 1), ("count", 3)):
            conn.execute(f"SELECT set_config('tcp_keepalives_{setting}', %s, false)", [str(value)])
        conn.execute(
            "SELECT set_config('statement_timeout', %s, false)", [str(int(self.retry_seconds * 2000))]
        )
        return conn

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close; it is gone anyway
                conn.close()

    def try_acquire(self) -> bool:
        """One try: True when this process leads now. A database that does not answer is a failed try
        (logged), retried on the next call with a new connection."""
        if self.held:
            return True
        try:
            if self.conn is None or self.conn.closed:
                self.conn = self._connect()
            row = self.conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()
        except psycopg.Error as exc:
            log.warning("%s: cannot try the leader lock: %s", self.name, str(exc).strip())
            self._close()
            return False
        self.held = bool(row and row[0])
        if self.held:
            self.renewed_at = time.monotonic()
            log.warning("%s: %s leads now", self.name, self.identity)
        return self.held

    def acquire(self, stop: threading.Event, on_standby: Callable[[], None] | None = None) -> bool:
        """Wait as a standby until this process leads (True) or `stop` is set (False); `on_standby` is called
        at each try, whether or not the database answered (a standby is healthy)."""
        log.info("%s: %s stands by until it can lead", self.name, self.identity)
        while not stop.is_set():
            if self.try_acquire():
                return True
            if on_standby is not None:
                on_standby()
            stop.wait(self.retry_seconds)
        return False

    # -- staying the leader -------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this process may act as the leader now: it holds the lock, has proved so within the renew
        deadline, and has not lost it."""
        return (
            self.held
            and self.lost_reason is None
            and time.monotonic() - self.renewed_at <= self.renew_deadline
        )

    def hold(self, on_lost: Callable[[str], None]) -> None:
        """Keep proving the lock (renewer) and call `on_lost(reason)` once, as soon as it cannot be (guard)."""
        if not self.held:
            raise RuntimeError("hold() before acquiring the lock")
        self._stop.clear()
        self._threads = [
            threading.Thread(
                target=self._renew, args=(on_lost,), name=f"{self.name}-leader-renew", daemon=True
            ),
            threading.Thread(
                target=self._guard, args=(on_lost,), name=f"{self.name}-leader-guard", daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()

    def _lose(self, on_lost: Callable[[str], None], reason: str) -> None:
        with self._lost_once:
            if self.lost_reason is not None or self._stop.is_set():
                return
            self.lost_reason = reason
        self._stop.set()
        on_lost(reason)

    def _renew(self, on_lost: Callable[[str], None]) -> None:
        while not self._stop.wait(self.retry_seconds):
            conn = self.conn
            try:
                if conn is None:
                    raise psycopg.OperationalError("the lock's connection is closed")
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND pid = pg_backend_pid() AND classid = 0 AND objid = %s AND objsubid = 1",
                    [self.key],
                ).fetchone()
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    self._lose(on_lost, f"the lock's connection failed: {str(exc).strip()}")
                return
            if not row or not row[0]:
                self._lose(on_lost, "the lock is no longer granted to this session")
                return
            self.renewed_at = time.monotonic()

    def _guard(self, on_lost: Callable[[str], None]) -> None:
        tick = min(0.2, self.retry_seconds / 5)
        while not self._stop.wait(tick):
            silent = time.monotonic() - self.renewed_at
            if silent > self.renew_deadline:
                self._lose(on_lost, f"the lock not proved for {silent:.1f} s")
                return

    def release(self) -> None:
        """Stop leading: the renewer and guard end, the connection closes, and a standby may lead."""
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=self.retry_seconds * 3)
        self._threads = []
        if self.held:
            log.warning("%s: %s stops leading", self.name, self.identity)
        self.held = False
        self._close()
