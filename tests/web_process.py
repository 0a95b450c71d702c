"""The web process (`python -m portal.web`: daphne, HTTP and WebSockets) as tests start it: on a free port,
with the test settings (`tests.e2e.settings`) serving a test database, the same Redis db as the test process,
and its output in a log; stopped on exit. Browser tests, upload tests and outage tests share it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the test server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (a local URL)
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the test server did not answer {url} within {timeout}s")


@contextmanager
def web_process(name: str, env_extra: dict[str, str], log_dir: Path) -> Iterator[str]:
    """The web process on a free port serving database `name`, its log at `log_dir`/daphne.log; yields its
    URL. Stopped on exit."""
    if not str(name).startswith("test_"):
        raise RuntimeError(f"refusing to serve {name!r} to browser tests: not a test database")
    from django.conf import settings

    port = _free_port()
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "tests.e2e.settings",
        "E2E_DATABASE_NAME": name,
        # The same Redis db as this process (Channels layer and Celery broker alike).
        "REDIS_URL": settings.REDIS_URL,
        **env_extra,
    }
    log = (log_dir / "daphne.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "portal.web",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "tests.e2e.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{url}/healthz", process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
