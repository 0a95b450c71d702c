"""ASGI entry point: Django for HTTP, Channels for WebSockets (session, else bearer-token authenticated)."""

import os
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.local")

from portal.asgi_body import spooled_asgi_application

# Django's ASGI handler, taking the body portal.web already spooled rather than copying it (portal/asgi_body.py).
django_asgi_app: Any = spooled_asgi_application()

from django.conf import settings  # noqa: E402

if settings.DEBUG:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from common.telemetry import CountWebSocketClients  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402
from tenants.ws_auth import (  # noqa: E402
    AllowedHostsOrTokenValidator,
    SessionAuthMiddlewareStack,
    TokenAuthMiddleware,
)

# Origin must match ALLOWED_HOSTS when sent (browsers always send it); a handshake without one (the CLI)
# must carry a bearer token. The session is tried first (looked up in the thread pool), the token second:
# see tenants/ws_auth.py.
application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": CountWebSocketClients(
            AllowedHostsOrTokenValidator(
                SessionAuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns)))
            )
        ),
    }
)
