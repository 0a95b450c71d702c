"""Local passwords on and off (LOCAL_LOGIN_ENABLED): off, the login page offers only the providers and every
password login is refused, the portal's and the admin console's."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.factories import make_user

pytestmark = pytest.mark.django_db


def test_passwords_on_log_in_as_before(settings: Any) -> None:
    settings.LOCAL_LOGIN_ENABLED = True
    make_user("bob")
    client = Client()
    page = client.get("/login/").content.decode()
    assert 'data-testid="password-login"' in page
    answer = client.post("/login/", {"username": "bob", "password": "pw"})
    assert answer.status_code == 302 and client.get("/tokens/").status_code == 200


def test_passwords_off_refuse_every_password_login(settings: Any) -> None:
    settings.LOCAL_LOGIN_ENABLED = False
    make_user("bob", is_staff=True, is_superuser=True)
    client = Client()
    assert 'data-testid="password-login"' not in client.get("/login/").content.decode()
    answer = client.post("/login/", {"username": "bob", "password": "pw"})
    assert answer.status_code == 403
    assert "Passwords are turned off here" in answer.content.decode()
    admin = client.post("/admin/login/?next=/admin/", {"username": "bob", "password": "pw"})
    assert admin.status_code == 200 and "correct username and password" in admin.content.decode()
    assert client.get("/tokens/").status_code == 302  # still signed out
