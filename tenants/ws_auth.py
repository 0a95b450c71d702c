"""WebSocket authentication by API token, for clients without a session (the `trainyard` CLI, scripts).

Three pieces, wired in `portal/asgi.py`:

- `TokenAuthMiddleware` sits inside `AuthMiddlewareStack`: when the session gave no user, it reads a bearer
  token from the handshake's `Authorization: Bearer ty_...` header or, for clients that cannot set headers,
  from a `Sec-WebSocket-Protocol` entry `bearer.ty_...`, and sets `scope["user"]` to the token's user (or
  leaves the anonymous user, whom the consumer closes with 4401). Tokens are never read from the query
  string: URLs end up in access logs.
- `SessionAuthMiddlewareStack` is Channels' `AuthMiddlewareStack` with the session and user lookup in the
  live sockets' read threads (`common.livereads`, which keep their connections) rather than on the one
  thread Channels gives all thread-sensitive work of the process: sockets connecting together look their
  sessions up in parallel instead of one after another. The lookup is Channels' own `get_user`, unchanged.
- `OriginOrTokenValidator` replaces Channels' `AllowedHostsOriginValidator`. A browser always sends `Origin`
  on a WebSocket handshake, so a handshake *with* `Origin` is checked against `ALLOWED_HOSTS` exactly as
  before (a cross-site page cannot ride on the session cookie). A handshake *without* `Origin` cannot come
  from a browser; Channels refuses it, which would lock out the CLI, so it is let through when it carries a
  bearer token, which is then the only thing that can authenticate it. Without `Origin` and without a
  token it is still refused.
"""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddleware, get_user
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import OriginValidator
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, get_user_model
from django.contrib.auth.models import AnonymousUser
from django.utils.crypto import constant_time_compare

from common.livereads import live_read
from tenants.tokens import token_id_live, token_live

TOKEN_SCOPE_KEY = "trainyard.token_id"  # noqa: S105 - a scope key, not a secret
"""Where the middleware leaves the id of the token that authenticated the socket (absent: the session did)."""

BEARER_PROTOCOL = "bearer."
"""A `Sec-WebSocket-Protocol` entry `bearer.<token>` carries a token for clients that cannot set headers."""

APP_PROTOCOL = "trainyard.v1"
"""The subprotocol the server selects when a client offers it (with `bearer.<token>`): browsers fail a
handshake that offered subprotocols and got none back, and the token itself is never echoed."""


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def bearer_secret(scope: dict[str, Any]) -> str | None:
    """The token a handshake carries: `Authorization: Bearer <token>`, else a `bearer.<token>` subprotocol."""
    header = _header(scope, b"authorization")
    if header:
        scheme, _, secret = header.partition(" ")
        if scheme.lower() == "bearer" and secret.strip():
            return secret.strip()
    for protocol in scope.get("subprotocols") or []:
        if protocol.startswith(BEARER_PROTOCOL) and len(protocol) > len(BEARER_PROTOCOL):
            return str(protocol[len(BEARER_PROTOCOL) :])
    return None


class SessionAuthMiddleware(AuthMiddleware):
    """Channels' `AuthMiddleware`, its session and user lookup run in a live-db thread.

    Safe off the thread-sensitive thread: the lookup reads the handshake's own session object (no other
    socket shares it) and two rows, opening no transaction, so nothing of it stays on the connection. (A
    session whose password hash no longer matches is flushed, as Channels does: one autocommitted delete.)"""

    async def resolve_scope(self, scope: dict[str, Any]) -> None:
        scope["user"]._wrapped = await live_read(get_user.func, scope)


def SessionAuthMiddlewareStack(inner: Any) -> CookieMiddleware:
    """`AuthMiddlewareStack` with `SessionAuthMiddleware`: cookies, then the session, then the user."""
    return CookieMiddleware(SessionMiddleware(SessionAuthMiddleware(inner)))


class TokenAuthMiddleware(BaseMiddleware):
    """Authenticates a WebSocket by bearer token when the session did not (session first, token second)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope.get("type") != "websocket":
            return await super().__call__(scope, receive, send)
        scope = dict(scope)
        secret = bearer_secret(scope)
        offered = list(scope.get("subprotocols") or [])
        # The consumer never sees the token among the subprotocols (nor could it echo it back).
        scope["subprotocols"] = [p for p in offered if not p.startswith(BEARER_PROTOCOL)]
        user = scope.get("user")
        if secret and (user is None or not user.is_authenticated):
            token = await database_sync_to_async(token_live)(secret)
            scope["user"] = token.user if token is not None else AnonymousUser()
            # Its id (never the secret), for the consumer to check later that the token still holds.
            scope[TOKEN_SCOPE_KEY] = token.pk if token is not None else None
        if len(scope["subprotocols"]) < len(offered) and APP_PROTOCOL in offered:
            send = _selecting(APP_PROTOCOL, send)
        return await super().__call__(scope, receive, send)


def _selecting(protocol: str, send: Any) -> Any:
    """`send`, with `protocol` chosen in a `websocket.accept` that chose none."""

    async def wrapped(message: dict[str, Any]) -> None:
        if message.get("type") == "websocket.accept" and not message.get("subprotocol"):
            message = {**message, "subprotocol": protocol}
        await send(message)

    return wrapped


class OriginOrTokenValidator(OriginValidator):
    """`Origin` must match the allowed hosts when present; a handshake without one needs a bearer token."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if (
            scope.get("type") == "websocket"
            and _header(scope, b"origin") is None
            and bearer_secret(scope) is not None
        ):
            return await self.application(scope, receive, send)
        return await super().__call__(scope, receive, send)


def AllowedHostsOrTokenValidator(application: Any) -> OriginOrTokenValidator:
    """`OriginOrTokenValidator` over `settings.ALLOWED_HOSTS` (as Channels' AllowedHostsOriginValidator)."""
    allowed_hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed_hosts:
        allowed_hosts = ["localhost", "127.0.0.1", "[::1]"]
    return OriginOrTokenValidator(application, allowed_hosts)


def still_authenticated(scope: dict[str, Any]) -> bool:
    """Whether what authenticated this socket still holds (blocking: call it in a thread). A token must
    still be live (not revoked, not expired) and its user active; a session must still exist (no logout
    since) with its user active and the password unchanged (Django's session auth hash)."""
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return False
    token_id = scope.get(TOKEN_SCOPE_KEY)
    if token_id is not None:
        return token_id_live(token_id, user_id=user.pk)
    session = scope.get("session")
    if session is None or not session.session_key or not session.exists(session.session_key):
        return False
    fresh = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    if fresh is None:
        return False
    stored = session.get(HASH_SESSION_KEY)
    return stored is None or constant_time_compare(stored, fresh.get_session_auth_hash())
