"""A PostgreSQL outage simulated on the shared test server, for code that runs in the test's own process
(consumers under a WebsocketCommunicator): the test database refuses every new connection, as when the
server is down, until the block ends. Done from a connection to the `postgres` database of the same server,
so it can always be undone.

Tests that run a server process stop a real server instead: a PostgreSQL cluster of their own
(tests/own_postgres.py, the `own_postgres` and `own_database` fixtures). In-process code shares the test's
own Django connection and settings, so it would share that cluster too and gain nothing from it but the
cluster's start-up; here the same refusal costs one ALTER DATABASE.

Open sessions are left alone unless `end_sessions`: the test process may hold connections in contexts it
cannot reach, and pytest-django flushes through them afterwards. Code run in the test's own thread may go
on with the test's connection: end the sessions, and close that connection after the block
(`connection.close()`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import connection
from psycopg import sql


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    settings = connection.settings_dict
    params = {key.lower(): settings[key] for key in ("HOST", "PORT", "USER", "PASSWORD") if settings.get(key)}
    return psycopg.connect(dbname="postgres", autocommit=True, **params)


@contextmanager
def postgres_down(*, end_sessions: bool = False) -> Iterator[None]:
    """Refuse connections to the test database (and with `end_sessions` end those open); allowed again on
    exit. Usable from async code (it runs no query on a Django connection)."""
    name = str(connection.settings_dict["NAME"])
    with _admin() as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        try:
            if end_sessions:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
                )
            yield
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )
