"""An open live socket does not outlive its credentials: a revoked token, a deactivated user, a logged-out
session or a changed password close it with 4401 at the next subscription or within the recheck interval;
malformed frames get an error frame and the socket stays open."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client

from jobs.models import Job
from jobs.services import job_submit
from portal.asgi import application
from tenants.models import ApiToken
from tenants.tokens import token_create, token_revoke
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db(transaction=True)
SPEC = {"name": "a", "image": "b", "command": ["c"]}
CLOSED = {"type": "websocket.close", "code": 4401}


@pytest.fixture
def owned() -> tuple[User, Job, str]:
    tenant = make_tenant(slug="vision")
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    _, secret = token_create(user=user, name="cli")
    return user, job, secret


def by_token(secret: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, "/ws/", headers=[(b"authorization", f"Bearer {secret}".encode())]
    )


def by_session(user: User) -> WebsocketCommunicator:
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    headers = [
        (b"origin", b"http://testserver"),
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()),
    ]
    return WebsocketCommunicator(application, "/ws/", headers=headers)


async def ask(comm: WebsocketCommunicator, **message: Any) -> dict[str, Any]:
    await comm.send_json_to(message)
    frame: dict[str, Any] = await comm.receive_output(timeout=5)
    if frame["type"] == "websocket.send":
        return dict(json.loads(frame["text"]))
    return dict(frame)


def test_a_token_revoked_while_its_socket_is_open_closes_it_at_the_next_subscription(
    owned: tuple[User, Job, str],
) -> None:
    user, job, secret = owned

    async def scenario() -> None:
        comm = by_token(secret)
        assert (await comm.connect())[0]
        assert (await ask(comm, action="subscribe", job=job.pk))["type"] == "subscribed"
        await database_sync_to_async(token_revoke)(token=await ApiToken.objects.aget(user=user))
        assert await ask(comm, action="subscribe", job=job.pk) == CLOSED
        await comm.wait()

    async_to_sync(scenario)()


def test_a_user_deactivated_while_idle_is_closed_within_the_recheck_interval(
    owned: tuple[User, Job, str], settings: Any
) -> None:
    settings.LIVE_AUTH_RECHECK_SECONDS = 0.2
    user, _, secret = owned

    async def scenario() -> None:
        comm = by_token(secret)
        assert (await comm.connect())[0]
        assert (await ask(comm, action="subscribe_tenant", tenant="vision"))["type"] == "subscribed_tenant"
        await User.objects.filter(pk=user.pk).aupdate(is_active=False)
        assert await comm.receive_output(timeout=10) == CLOSED, "closed without anything sent"
        await comm.wait()

    async_to_sync(scenario)()


@pytest.mark.parametrize("how", ["logout", "password"])
def test_a_session_logged_out_or_whose_password_changed_closes_its_socket(
    owned: tuple[User, Job, str], how: str
) -> None:
    user, job, _ = owned

    async def scenario() -> None:
        comm = await database_sync_to_async(by_session)(user)
        assert (await comm.connect())[0]
        assert (await ask(comm, action="subscribe", job=job.pk))["type"] == "subscribed"
        if how == "logout":
            await Session.objects.all().adelete()
        else:
            fresh = await User.objects.aget(pk=user.pk)
            fresh.set_password("a-new-password")
            await fresh.asave()
        assert await ask(comm, action="subscribe", job=job.pk) == CLOSED
        await comm.wait()

    async_to_sync(scenario)()


@pytest.mark.parametrize(
    "message",
    [
        {"action": "unsubscribe_tenant", "tenant": "x" * 100},
        {"action": "unsubscribe_tenant", "tenant": "équipe"},
        {"action": "subscribe_tenant", "tenant": "vi\x00sion"},
        {"action": "subscribe", "job": "ab\x00cd"},
        {"action": "unsubscribe", "job": "../../etc"},
    ],
)
def test_malformed_names_get_an_error_frame_and_the_socket_stays_open(
    owned: tuple[User, Job, str], message: dict[str, Any]
) -> None:
    _, job, secret = owned

    async def scenario() -> None:
        comm = by_token(secret)
        assert (await comm.connect())[0]
        answer = await ask(comm, **message)
        assert answer["type"] == "error" and "must be an id" in answer["error"], answer
        assert (await ask(comm, action="subscribe", job=job.pk))["type"] == "subscribed", "still open"
        await comm.disconnect()

    async_to_sync(scenario)()
