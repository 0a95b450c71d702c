"""A PostgreSQL outage for tests: the test database refuses new connections and loses every open session,
as when the server is down, until the block ends. Done from a connection to the `postgres` database of the
same server (the test's own connection may be one of those ended), so it can always be undone."""

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
def postgres_down() -> Iterator[None]:
    """Refuse connections to the test database and end its sessions; connections are allowed again on exit.
    Usable from async code (it touches no Django connection); a sync caller whose own connection was ended
    closes it afterwards (`connection.close()`), so that its next query opens a fresh one."""
    name = str(connection.settings_dict["NAME"])
    with _admin() as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        try:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
            yield
        finally:
            admin.execute(
                sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )
