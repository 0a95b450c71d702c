"""`manage.py ensure_database`: create the database DATABASE_URL names if its server lacks it (what `make db`
runs before `migrate`), connecting to the same server, port and user through its `postgres` database."""

from __future__ import annotations

from typing import Any

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from psycopg import sql
from psycopg.conninfo import make_conninfo


class Command(BaseCommand):
    help = "Create the configured PostgreSQL database if it does not exist yet (DATABASE_URL)."

    def handle(self, *args: Any, **options: Any) -> None:
        db = settings.DATABASES["default"]
        name = str(db["NAME"])
        params: dict[str, Any] = {
            "dbname": "postgres",
            "host": db.get("HOST") or None,
            "port": db.get("PORT") or None,
            "user": db.get("USER") or None,
            "password": db.get("PASSWORD") or None,
            "connect_timeout": 10,
        }
        where = f"{params['host'] or 'the local socket'}" + (f":{params['port']}" if params["port"] else "")
        try:
            conninfo = make_conninfo(**{k: v for k, v in params.items() if v is not None})
            with psycopg.connect(conninfo, autocommit=True) as conn:
                found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
                if found:
                    self.stdout.write(f"database {name} on {where} is there")
                    return
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            raise CommandError(f"cannot create database {name} on {where}: {exc}") from exc
        self.stdout.write(f"created database {name} on {where}")
