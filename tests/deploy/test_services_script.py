"""`make services` (deploy/local/services.sh) checks and starts the PostgreSQL and Redis that DATABASE_URL
and REDIS_URL name, not always the ones on the default ports."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import redis

from tests.conftest import _free_port

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local" / "services.sh"


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_redis_of_redis_url_is_started_on_its_own_port() -> None:
    port = _free_port()
    local = redis.Redis(port=port, socket_connect_timeout=1)
    try:
        done = _run(REDIS_URL=f"redis://127.0.0.1:{port}/3", DATABASE_URL="postgres:///postgres")
        assert done.returncode == 0, done.stderr
        assert f"starting Redis on port {port}" in done.stdout
        assert local.ping()
        again = _run(REDIS_URL=f"redis://127.0.0.1:{port}/3", DATABASE_URL="postgres:///postgres")
        assert again.returncode == 0 and "starting" not in again.stdout, "an answering Redis is left alone"
    finally:
        with contextlib.suppress(redis.ConnectionError):  # shutdown drops the connection; or never started
            local.shutdown(nosave=True)


def test_a_database_url_no_local_cluster_serves_is_reported() -> None:
    port = _free_port()
    done = _run(DATABASE_URL=f"postgres://127.0.0.1:{port}/trainyard")
    assert done.returncode == 1
    assert f"no local PostgreSQL cluster listens on port {port} (DATABASE_URL)" in done.stderr
