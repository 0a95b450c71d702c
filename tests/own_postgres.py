"""A PostgreSQL server of a test's own, which the test stops and starts: a real outage (the server shuts
down, its sessions end, new connections are refused at TCP level), not one simulated on the shared server.

`OwnPostgres` initdb's a cluster once in a temporary folder (data and socket), on 127.0.0.1 and a free port,
with trust authentication and no fsync; `stop()` is `pg_ctl stop -m fast` and `start()` brings the same
cluster (and its data) back on the same port. `close()` stops it if it runs and removes the folder: a test
run leaves no postgres process behind. PostgreSQL refuses to run as root, so as root the programs run as
the `postgres` OS user, in a folder that user owns.

`template()` makes the project's schema once (`manage.py migrate` against the cluster, in a subprocess: the
same code path as a deployment, content types and permissions included); `fresh_database()` clones it for
one test (`CREATE DATABASE ... TEMPLATE`, a file copy). `as_default()` points this process's Django
connections at such a database for a block, so factories and services write where a server started on
the cluster reads."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

BIN = Path(os.environ.get("POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
ROOT = Path(__file__).resolve().parent.parent
OWNER = "postgres"  # the OS user that runs the server when this process is root
SUPERUSER = "postgres"  # the cluster's superuser role (trust authentication: no password)
TEMPLATE = "trainyard_template"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnPostgres:
    """One PostgreSQL cluster in a temporary folder, started and stopped by the test that owns it."""

    def __init__(self) -> None:
        self.as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="trainyard-own-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.running = False
        self._names = itertools.count(1)
        try:
            if self.as_root:
                shutil.chown(self.root, user=OWNER, group=OWNER)
            self._run(
                "initdb",
                f"--pgdata={self.data}",
                f"--username={SUPERUSER}",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            )
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def _run(self, program: str, *args: str) -> None:
        command = [str(BIN / program), *args]
        if self.as_root:
            command = ["runuser", "-u", OWNER, "--", *command]
        result = subprocess.run(command, cwd=self.root, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{program} failed ({result.returncode}): {result.stderr}{result.stdout}{log}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        )
        self._run("pg_ctl", "start", "--wait", f"--pgdata={self.data}", f"--log={self.log}", "-o", options)
        self.running = True

    def stop(self) -> None:
        """Shut the server down now (`-m fast`): open sessions are ended, new connections refused."""
        self._run("pg_ctl", "stop", "--wait", f"--pgdata={self.data}", "--mode=fast")
        self.running = False

    def close(self) -> None:
        """Stop the server if it runs, and remove its folder."""
        try:
            if self.running:
                self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, name: str) -> str:
        """The DATABASE_URL of database `name` (as django-environ and the settings read it)."""
        return f"postgres://{SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def settings(self, name: str) -> dict[str, str]:
        """The Django connection settings that differ for database `name` of this cluster."""
        return {"NAME": name, "HOST": "127.0.0.1", "PORT": str(self.port), "USER": SUPERUSER, "PASSWORD": ""}

    def connect(self, name: str = "postgres") -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname=name, autocommit=True)

    def template(self) -> None:
        """Create the template database with the project's schema (migrations, content types, permissions)."""
        with self.connect() as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
        env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "portal.settings.test",
            "DATABASE_URL": self.url(TEMPLATE),
        }
        result = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--no-input", "--verbosity=0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"migrate on the own cluster failed: {result.stderr}{result.stdout}")

    def fresh_database(self) -> str:
        """A new database cloned from the template; its name."""
        name = f"test_own_{next(self._names)}"
        with self.connect() as admin:
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(TEMPLATE)
                )
            )
        return name

    @contextmanager
    def down(self) -> Iterator[None]:
        """The server stopped for the block, started again after it (even when the block fails)."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def drop_database(self, name: str) -> None:
        with self.connect() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def as_default(cluster: OwnPostgres, name: str) -> Iterator[None]:
    """Within the block, this process's Django connections (every thread's: they share the settings dict)
    go to database `name` of the cluster; the test database again after it. The cached content types
    (Django's, guardian's) are forgotten both ways: their ids differ between the two databases."""
    from django.db import connections

    settings_dict = connections["default"].settings_dict
    saved = dict(settings_dict)
    _forget(connections)
    settings_dict.update(cluster.settings(name))
    try:
        yield
    finally:
        _forget(connections)
        settings_dict.clear()
        settings_dict.update(saved)


def _forget(connections: Any) -> None:
    from django.contrib.contenttypes.models import ContentType
    from guardian.shortcuts import clear_ct_cache

    connections.close_all()
    ContentType.objects.clear_cache()
    clear_ct_cache()
