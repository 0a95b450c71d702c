"""A local HTTP server for tests that need something to answer over HTTP (a cluster's DCGM exporter)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serving(answer: Callable[[], str]) -> Iterator[str]:
    """A local HTTP server answering every GET with `answer()` (e.g. a cluster's DCGM exporter); yields its
    URL and is stopped on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answer().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
