"""The browser tests' ASGI app: the portal's HTTP and WebSocket routes, with static files served by Django.

The tests flush the database between tests, which recreates content types under new ids; the cache of them
caches (Django's and guardian's) are cleared before every request so that permission checks in this
long-lived process see the new ones.
"""

from typing import Any

import django

django.setup()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.contenttypes.models import ContentType  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from guardian.shortcuts import clear_ct_cache  # noqa: E402

from portal.asgi_body import spooled_asgi_application  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402


class FreshContentTypes:
    """Forget cached content types before each connection is handled."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        ContentType.objects.clear_cache()
        clear_ct_cache()
        await self.app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": FreshContentTypes(ASGIStaticFilesHandler(spooled_asgi_application())),
        "websocket": FreshContentTypes(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
