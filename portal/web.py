"""The web process: daphne, with request bodies bounded before they are read and fed to Django lazily.

Run as `python -m portal.web <daphne's arguments> portal.asgi:application` (Procfile, deploy/k8s/base/web.yaml).
Daphne 4 (Twisted) receives a whole request body into a temporary file before it calls the application,
then puts every 8 KiB piece of it on the application's asyncio queue at once: a 64 MiB upload held about
that much again in memory, a 4 GiB result file would have held 4 GiB. Before that, Twisted parses a POSTed
multipart form whole in memory for `request.args`, which daphne never reads: a 64 MiB code upload took the
process to 950 MB. Three changes, all here:

- the size is checked when the headers are in (`gotLength`): a `Content-Length` over the route's limit
  (portal.bodylimits) is answered 413 in the API's error shape at once, with `Connection: close`, and not one
  byte of the body is kept; a body without a length (chunked) is counted as it arrives and refused the same
  way the moment it passes the limit, its spooled part thrown away. A refused request never reaches Django;
  what the client still sends is dropped for LINGER_SECONDS, then the connection is closed;
- the application reads the spooled body a piece at a time as it asks for it (`LazyBodyQueue`), so the web
  process holds one piece, not the body;
- Twisted's form parsing is off (`BoundedRequest.__init__`).

And where the application is Django's handler as portal.asgi builds it (portal.asgi_body), Django takes the
spooled file itself as the body rather than copying it into a file of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from typing import Any, cast

from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server

from portal.asgi_body import EXTENSION

logger = logging.getLogger(__name__)

PIECE = 1 << 16  # bytes of the spooled body handed to the application per receive()
LINGER_SECONDS = 2.0  # how long a refused request's connection stays open, dropping what arrives


class _Emptied:
    """Stands in for a request's spooled body while daphne feeds its queue: reads give nothing, so daphne
    queues one empty message, and the real file is read by LazyBodyQueue instead."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def read(self, size: int = -1) -> bytes:
        return b""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class LazyBodyQueue(asyncio.Queue):
    """An application's receive queue that hands out the request body from its spooled file on demand, or
    hands the file itself to an application that claims it (portal.asgi_body)."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self._body = body

    def claim(self) -> Any:
        """The spooled body file, for the application to read itself; receive() then gives no body."""
        body, self._body = self._body, None
        return body

    def put_nowait(self, item: Any) -> None:
        if isinstance(item, dict) and item.get("type") == "http.request":
            return  # daphne's own (emptied) body message: the body comes from get() below, or claim()
        super().put_nowait(item)

    async def get(self) -> Any:
        if self._body is not None and self.empty():
            try:
                piece = self._body.read(PIECE)
            except ValueError:  # the spool was closed: the client went away
                piece = b""
            more = len(piece) == PIECE
            if not more:
                self._body = None
            return {"type": "http.request", "body": piece, "more_body": more}
        return await super().get()


def refusal_response(limit: int, message: str, cap: str) -> bytes:
    """The raw HTTP answer to a body over its limit: 413 with the API's error shape plus `cap` and `limit`."""
    body = json.dumps({"detail": message, "errors": {"": [message]}, "cap": cap, "limit": limit}).encode()
    head = (
        "HTTP/1.1 413 Content Too Large\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class BoundedRequest(WebRequest):
    """daphne's request, refusing a body over its route's limit before (or while) it is received."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Twisted parses a POSTed form into `request.args` before daphne sees the request, reading a multipart
        # body whole into memory and through the email parser (a 64 MiB code upload took the process from
        # 140 MB to 950 MB, and seconds of CPU); daphne never reads `args`, Django parses the form itself.
        self._parsePOSTFormSubmission = False

    def gotLength(self, length: int | None) -> None:
        from portal.bodylimits import body_limit

        self._received = 0
        self._refused = False
        method = getattr(self.channel, "_command", b"").decode("latin-1")
        path = getattr(self.channel, "_path", b"").split(b"?", 1)[0].decode("latin-1")
        self._limit = body_limit(method, path)
        if length is not None and length > self._limit.bytes:
            self.requestHeaders.removeHeader(b"Expect")  # no "100 Continue": the answer is final
            super().gotLength(0)  # an empty in-memory body, never written to
            self._refuse(f"Content-Length {length}")
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        self._received += len(data)
        if self._received > self._limit.bytes:
            self._refuse(f"more than {self._limit.bytes} bytes received")
            self.content.close()  # a TemporaryFile: closing removes what was spooled
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._refused:
            return
        super().requestReceived(command, path, version)

    def _refuse(self, why: str) -> None:
        from twisted.internet import reactor  # daphne installed the asyncio reactor by now

        self._refused = True
        limit = self._limit
        logger.warning("refused a request body over %d bytes (%s): %s", limit.bytes, limit.cap, why)
        transport = self.channel.transport
        transport.write(refusal_response(limit.bytes, limit.message, limit.cap))
        # What the client still sends is read and dropped for a moment before closing (a lingering close, as
        # nginx does): closing at once with its bytes unread would reset the connection, and a client that
        # is still sending would lose the answer.
        cast(Any, reactor).callLater(LINGER_SECONDS, transport.loseConnection)


class BoundedHTTPFactory(HTTPFactory):
    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol


class BoundedServer(Server):
    """daphne's server with BoundedRequest for HTTP and a LazyBodyQueue per HTTP application."""

    def run(self) -> None:
        import daphne.server

        # Server.run builds its HTTP factory by this module-level name.
        setattr(daphne.server, "HTTPFactory", BoundedHTTPFactory)  # noqa: B010
        super().run()

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        if scope.get("type") != "http" or not hasattr(protocol, "content"):
            return super().create_application(protocol, scope)
        assert "application_instance" not in self.connections[protocol]
        queue = LazyBodyQueue(protocol.content)
        protocol.content = _Emptied(protocol.content)
        scope.setdefault("asgi", {"version": "3.0"})
        scope.setdefault("extensions", {})[EXTENSION] = {"claim": queue.claim}
        instance = self.application(scope=scope, receive=queue.get, send=partial(self.handle_reply, protocol))
        if protocol not in self.connections:
            return None
        self.connections[protocol]["application_instance"] = asyncio.ensure_future(
            instance, loop=asyncio.get_event_loop()
        )
        return queue


class BoundedCommandLineInterface(CommandLineInterface):
    server_class = BoundedServer


if __name__ == "__main__":
    BoundedCommandLineInterface.entrypoint()
