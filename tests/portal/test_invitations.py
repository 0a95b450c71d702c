"""E-mail invitations: an owner invites an address from the tenant page (the link is e-mailed and shown
once), the user with that address accepts it after logging in and becomes a member; links are single use,
expire, can be revoked, and work only for the invited address; members cannot invite; all audited."""

from __future__ import annotations

import re
import socket
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client
from django.utils import timezone

from tenants.invitations import invitation_create
from tenants.models import Invitation, Membership, MembershipEvent, Tenant
from tests.factories import make_user, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def boss(team: Tenant) -> User:
    return member(team, "owner", username="boss")


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _path(link: str) -> str:
    return "/" + link.split("/", 3)[3]


def test_owner_invites_and_the_invited_user_accepts(team: Tenant, boss: User) -> None:
    response = _client(boss).post(
        f"/tenants/{team.slug}/invitations/", {"email": "Dana@Example.org", "role": "viewer"}
    )
    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    shown = re.search(r'data-testid="invitation-link">([^<]+)<', response.content.decode())
    assert shown is not None and "was e-mailed" in response.content.decode()
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["Dana@Example.org"]
    link = shown.group(1)
    assert link in mail.outbox[0].body
    invitation = Invitation.objects.get()
    assert link.rsplit("/", 2)[-2] not in invitation.digest

    anonymous = Client().get(_path(link))
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/?next=/invitations/")

    dana = make_user("dana", email="dana@example.org")
    page = _client(dana).get(_path(link))
    assert page.status_code == 200 and "Join Team alpha" in page.content.decode()
    accepted = _client(dana).post(_path(link), follow=True)
    assert accepted.redirect_chain == [(f"/tenants/{team.slug}/", 302)]
    assert "You joined Team alpha as viewer." in accepted.content.decode()
    assert Membership.objects.get(tenant=team, user=dana).role == "viewer"
    actions = list(
        MembershipEvent.objects.filter(tenant=team).values_list("action", "username", "actor__username")
    )
    assert actions == [("added", "dana", "dana"), ("invited", "Dana@Example.org", "boss")]

    again = _client(dana).post(_path(link))
    assert again.status_code == 410 and "already used" in again.content.decode()


def test_only_the_invited_address_may_accept(team: Tenant, boss: User) -> None:
    _, secret = invitation_create(tenant=team, actor=boss, email="dana@example.org", role="member")
    eve = make_user("eve", email="eve@example.org")
    response = _client(eve).post(f"/invitations/{secret}/")
    assert (
        response.status_code == 403 and "this invitation is for dana@example.org" in response.content.decode()
    )
    assert not Membership.objects.filter(user=eve).exists()
    assert Invitation.objects.get().accepted_at is None


def test_expired_revoked_and_unknown_links_are_refused(team: Tenant, boss: User) -> None:
    dana = make_user("dana", email="dana@example.org")
    _, secret = invitation_create(tenant=team, actor=boss, email="dana@example.org")
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _client(dana).post(f"/invitations/{secret}/").status_code == 410
    assert _client(dana).get("/invitations/inv_nonsense/").status_code == 404
    Invitation.objects.update(expires_at=timezone.now() + timedelta(days=1))
    invitation = Invitation.objects.get()
    revoked = _client(boss).post(f"/tenants/{team.slug}/invitations/{invitation.pk}/revoke/", follow=True)
    assert "Invitation of dana@example.org revoked." in revoked.content.decode()
    response = _client(dana).get(f"/invitations/{secret}/")
    assert response.status_code == 410 and "revoked" in response.content.decode()
    assert not Membership.objects.filter(user=dana).exists()


@pytest.mark.parametrize(
    ("email", "role", "words"),
    [
        ("not-an-address", "member", "enter a valid e-mail address"),
        ("dana@example.org", "king", "choose one of owner, member, viewer"),
        ("alice@example.org", "member", "a member of alpha already has the address"),
        ("pending@example.org", "member", "already has a pending invitation"),
    ],
)
def test_bad_invitations_come_back_as_messages(
    team: Tenant, boss: User, email: str, role: str, words: str
) -> None:
    member(team, "member", username="al", email="alice@example.org")
    invitation_create(tenant=team, actor=boss, email="pending@example.org")
    response = _client(boss).post(
        f"/tenants/{team.slug}/invitations/", {"email": email, "role": role}, follow=True
    )
    assert any(words in str(m) for m in response.context["messages"])
    assert Invitation.objects.count() == 1 and not mail.outbox


def test_members_cannot_invite(signed_in: Client, team: Tenant, boss: User) -> None:
    response = signed_in.post(f"/tenants/{team.slug}/invitations/", {"email": "dana@example.org"})
    assert response.status_code == 403 and not Invitation.objects.exists()
    assert 'id="member-invite"' not in signed_in.get(f"/tenants/{team.slug}/").content.decode()


def test_owner_sees_pending_invitations(team: Tenant, boss: User) -> None:
    invitation_create(tenant=team, actor=boss, email="dana@example.org", role="viewer")
    body = _client(boss).get(f"/tenants/{team.slug}/").content.decode()
    assert 'data-invitation="dana@example.org"' in body and "dana@example.org as viewer" in body


def test_when_mail_fails_the_owner_still_gets_the_link(team: Tenant, boss: User, settings: Any) -> None:
    with socket.socket() as sock:  # a port nothing listens on: the SMTP connection is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", port, 5
    response = _client(boss).post(f"/tenants/{team.slug}/invitations/", {"email": "dana@example.org"})
    body = response.content.decode()
    assert response.status_code == 201 and "could not be sent: pass the link on yourself" in body
    assert 'data-testid="invitation-link">http' in body and Invitation.objects.count() == 1
