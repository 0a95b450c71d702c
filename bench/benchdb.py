"""The database a benchmark runs on: never the developer's. `prepare_database()` creates the database the
settings name (a bench sets its own name, e.g. ``trainyard_bench``, before calling it) if it is missing,
through the server's ``postgres`` database, then sets Django up, migrates and flushes it."""

from __future__ import annotations


def prepare_database(name: str | None = None) -> None:
    """Create the bench database if missing (`name`, or the one the settings already name), then set Django
    up, migrate and flush it."""
    import django
    import psycopg
    from django.conf import settings
    from psycopg import sql

    db = settings.DATABASES["default"]
    if name is not None:
        db["NAME"] = name
    params = {key.lower(): db[key] for key in ("HOST", "PORT", "USER", "PASSWORD") if db.get(key)}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    call_command("flush", verbosity=0, interactive=False)
