"""Bearer-token authentication of the `/ws/` WebSocket through the real ASGI application (portal.asgi):
the Authorization header or a `bearer.<token>` subprotocol, the Origin rules, and tenant scoping."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import Job
from jobs.services import job_submit
from portal.asgi import application
from tenants.models import ApiToken
from tenants.tokens import token_create, token_revoke
from tenants.ws_auth import TokenAuthMiddleware, bearer_secret
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db(transaction=True)
SPEC = {"name": "a", "image": "b", "command": ["c"]}


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async_to_sync(scenario)()


@pytest.fixture
def owned() -> tuple[User, Job, str]:
    """A member of a tenant, a job of theirs and a live token of theirs."""
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    _, secret = token_create(user=user, name="cli")
    return user, job, secret


def socket(
    headers: list[tuple[bytes, bytes]] | None = None, subprotocols: list[str] | None = None
) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/", headers=headers or [], subprotocols=subprotocols)


def bearer(secret: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {secret}".encode())


async def subscribe(comm: WebsocketCommunicator, job_id: str) -> dict[str, Any]:
    await comm.send_json_to({"action": "subscribe", "job": job_id})
    frame: dict[str, Any] = await comm.receive_json_from(timeout=5)
    return frame


def test_token_in_the_authorization_header_without_origin_subscribes_to_its_job(
    owned: tuple[User, Job, str],
) -> None:
    _, job, secret = owned

    async def scenario() -> None:
        comm = socket([(b"host", b"testserver"), bearer(secret)])  # no Origin: not a browser
        connected, _ = await comm.connect()
        assert connected
        frame = await subscribe(comm, job.pk)
        assert frame["type"] == "subscribed" and frame["job"] == job.pk and frame["status"] == "queued"
        await comm.disconnect()

    run(scenario)


def test_token_as_a_subprotocol_is_accepted_and_never_echoed(owned: tuple[User, Job, str]) -> None:
    _, job, secret = owned

    async def scenario() -> None:
        comm = socket([(b"origin", b"http://testserver")], subprotocols=["trainyard.v1", f"bearer.{secret}"])
        connected, protocol = await comm.connect()
        assert connected and protocol == "trainyard.v1"
        assert (await subscribe(comm, job.pk))["type"] == "subscribed"
        await comm.disconnect()

    run(scenario)


@pytest.mark.parametrize("kind", ["revoked", "wrong", "inactive-user"])
def test_a_revoked_or_wrong_token_is_closed_4401(owned: tuple[User, Job, str], kind: str) -> None:
    user, _, secret = owned
    if kind == "revoked":
        token_revoke(token=ApiToken.objects.get(user=user))
    elif kind == "wrong":
        secret = "ty_not-a-real-token"
    else:
        User.objects.filter(pk=user.pk).update(is_active=False)

    async def scenario() -> None:
        comm = socket([bearer(secret)])
        connected, _ = await comm.connect()
        assert connected  # accepted, then closed with the reason
        assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
        await comm.disconnect()  # end the application instance here, not in the loop's shutdown

    run(scenario)


def test_another_tenants_job_is_not_found(owned: tuple[User, Job, str]) -> None:
    _, _, secret = owned
    other = make_tenant()
    foreign = job_submit(tenant=other, user=member(other), document=SPEC)

    async def scenario() -> None:
        comm = socket([bearer(secret)])
        assert (await comm.connect())[0]
        assert await subscribe(comm, foreign.pk) == {"type": "error", "job": foreign.pk, "error": "not found"}
        assert await subscribe(comm, "nosuchjob") == {
            "type": "error",
            "job": "nosuchjob",
            "error": "not found",
        }
        await comm.disconnect()

    run(scenario)


def test_origin_rules_for_browsers_are_unchanged(owned: tuple[User, Job, str]) -> None:
    _, _, secret = owned

    async def scenario() -> None:
        # A foreign page may not connect, token or not.
        foreign = socket([(b"origin", b"https://evil.example"), bearer(secret)])
        assert (await foreign.connect())[0] is False
        # No Origin and no token: refused before any consumer runs (as Channels does).
        bare = socket([(b"host", b"testserver")])
        assert (await bare.connect())[0] is False
        # An allowed Origin without credentials reaches the consumer, which closes it 4401.
        anonymous = socket([(b"origin", b"http://testserver")])
        assert (await anonymous.connect())[0]
        assert await anonymous.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
        await anonymous.disconnect()  # end the application instance here, not in the loop's shutdown

    run(scenario)


def test_the_session_comes_first(owned: tuple[User, Job, str]) -> None:
    user, job, _ = owned

    async def scenario() -> None:
        client = Client()
        await database_sync_to_async(client.force_login)(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        comm = socket(
            [
                (b"origin", b"http://testserver"),
                (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
                bearer("ty_not-a-real-token"),  # ignored: the session already authenticated
            ]
        )
        assert (await comm.connect())[0]
        assert (await subscribe(comm, job.pk))["type"] == "subscribed"
        await comm.disconnect()

    run(scenario)


def test_the_token_is_kept_out_of_the_consumers_scope() -> None:
    seen: dict[str, Any] = {}

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.update(scope)
        await receive()
        await send({"type": "websocket.accept"})

    async def scenario() -> None:
        comm = WebsocketCommunicator(
            TokenAuthMiddleware(inner), "/ws/", subprotocols=["trainyard.v1", "bearer.ty_secret"]
        )
        comm.scope["user"] = await database_sync_to_async(User.objects.create_user)("someone")
        connected, protocol = await comm.connect()
        assert connected and protocol == "trainyard.v1"
        assert seen["subprotocols"] == ["trainyard.v1"]
        await comm.disconnect()

    run(scenario)


def test_bearer_secret_reads_the_header_then_the_subprotocol() -> None:
    assert bearer_secret({"headers": [(b"authorization", b"Bearer ty_a ")]}) == "ty_a"
    assert bearer_secret({"headers": [(b"authorization", b"Basic eDp5")], "subprotocols": []}) is None
    assert bearer_secret({"headers": [], "subprotocols": ["x", "bearer.ty_b"]}) == "ty_b"
    assert bearer_secret({"headers": [], "subprotocols": ["bearer."]}) is None
    assert bearer_secret({"query_string": b"token=ty_c", "headers": []}) is None  # never from the URL
