"""A tiny stand-in for the platform's artifact endpoints, for running the pod kit against real HTTP.

It serves one code ZIP at `/code.zip` (403 unless the token header is right), accepts result PUTs
under `/results/files/...` and the `POST /results/complete`, and records every request it gets.
`reject_results` makes the results endpoints answer 403, as for a stale token.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "tok-attempt-1-secret"
TOKEN_HEADER = "X-Trainyard-Artifact-Token"
TIMEOUT = 60
# The interpreter that runs the pod kit: pods may bring any Python 3.9+, so CI can point this at one.
PODKIT_PYTHON = os.environ.get("TRAINYARD_PODKIT_PYTHON", sys.executable)


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ArtifactServer:
    """What the fake serves and what it has been sent."""

    base: str = ""
    code: bytes = b""
    reject_results: bool = False
    unavailable_puts: int = 0  # answer this many PUTs with 503 first (an outage of the platform)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def code_url(self) -> str:
        return f"{self.base}/code.zip"

    @property
    def results_url(self) -> str:
        return f"{self.base}/results"

    def received(self, method: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method]


def _handler(state: ArtifactServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _record(self) -> Recorded:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            entry = Recorded(self.command, self.path, dict(self.headers.items()), body)
            with state.lock:
                state.requests.append(entry)
            return entry

        def _answer(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorized(self, entry: Recorded) -> bool:
            return entry.headers.get(TOKEN_HEADER) == TOKEN

        def do_GET(self) -> None:
            entry = self._record()
            if entry.path != "/code.zip":
                self._answer(404)
            elif not self._authorized(entry):
                self._answer(403, b"bad token")
            else:
                self._answer(200, state.code)

        def do_PUT(self) -> None:
            entry = self._record()
            with state.lock:
                outage = state.unavailable_puts > 0
                state.unavailable_puts -= outage
            if outage:
                self._answer(503)
            elif state.reject_results or not self._authorized(entry):
                self._answer(403)
            else:
                self._answer(201 if entry.path.startswith("/results/files/") else 404)

        def do_POST(self) -> None:
            entry = self._record()
            if state.reject_results or not self._authorized(entry):
                self._answer(403)
            else:
                self._answer(200 if entry.path == "/results/complete" else 404, b"{}")

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def running_artifact_server() -> Iterator[ArtifactServer]:
    """Serve an `ArtifactServer` on a free local port for the duration of the block."""
    state = ArtifactServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port_url() -> str:
    """A local URL nothing listens on, so connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/results"
