"""Django's ASGI handler, taking a request body the web process already spooled to a file (portal.web)
instead of copying it into a second one.

Django's ASGIHandler reads the whole body through `receive()` into a SpooledTemporaryFile before the view
runs; under daphne the body is already in a temporary file, so a 4 GiB result file took 8 GiB of the web
container's /tmp and a second pass over its bytes. portal.web offers its file in the scope (extension
`trainyard.spooled_body`, whose `claim()` hands it over once); this handler claims it and gives Django that
file as the body. Under any other server (no such extension) it is Django's handler unchanged.
"""

from __future__ import annotations

from typing import Any

import django
from django.core.handlers.asgi import ASGIHandler

EXTENSION = "trainyard.spooled_body"


class _Spooled:
    """`receive`, carrying the claimed body file for `read_body`."""

    def __init__(self, receive: Any, body: Any) -> None:
        self.receive = receive
        self.body = body

    async def __call__(self) -> Any:
        return await self.receive()


class SpooledBodyASGIHandler(ASGIHandler):
    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        offer = (scope.get("extensions") or {}).get(EXTENSION) or {}
        body = offer["claim"]() if "claim" in offer else None
        await super().handle(scope, _Spooled(receive, body) if body is not None else receive, send)

    async def read_body(self, receive: Any) -> Any:
        if isinstance(receive, _Spooled):
            receive.body.seek(0)
            return receive.body
        return await super().read_body(receive)


def spooled_asgi_application() -> SpooledBodyASGIHandler:
    """What django.core.asgi.get_asgi_application() gives, with SpooledBodyASGIHandler."""
    django.setup(set_prefix=False)
    return SpooledBodyASGIHandler()
