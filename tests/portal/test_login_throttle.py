"""Login throttling (django-axes) on both login pages: too many wrong passwords for one username from one
address are refused for a while with a page that says so; other users and other addresses log in. Many
wrong passwords from one address across usernames (password spraying) lock that address."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def low_limit(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 6


def attempt(path: str, username: str, password: str, address: str = "10.0.0.1") -> int:
    response = Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})
    return response.status_code


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_wrong_passwords_lock_that_username_at_that_address_with_a_clear_page(path: str) -> None:
    make_user("alice", password="right-pw", is_staff=True)
    assert [attempt(path, "alice", "wrong") for _ in range(2)] == [200, 200], "the form again, with an error"
    response = Client(REMOTE_ADDR="10.0.0.1").post(path, {"username": "alice", "password": "wrong"})
    assert response.status_code == 429
    text = response.content.decode()
    assert "Too many failed logins" in text and "Try again in 15 minutes" in text

    assert attempt(path, "alice", "right-pw") == 429, "locked: even the right password waits"
    assert attempt(path, "alice", "right-pw", address="10.0.0.2") == 302, "another address is not locked"


def test_other_users_from_the_same_address_still_log_in() -> None:
    make_user("alice", password="right-pw")
    make_user("bob", password="bob-pw")
    for _ in range(3):
        attempt("/login/", "alice", "wrong")
    assert attempt("/login/", "alice", "right-pw") == 429
    assert attempt("/login/", "bob", "bob-pw") == 302


def test_a_successful_login_clears_the_count() -> None:
    make_user("alice", password="right-pw")
    for _ in range(2):
        attempt("/login/", "alice", "wrong")
    assert attempt("/login/", "alice", "right-pw") == 302
    assert [attempt("/login/", "alice", "wrong") for _ in range(2)] == [200, 200]


def test_behind_a_trusted_proxy_the_forwarded_address_counts(settings: Any) -> None:
    settings.TRUSTED_PROXY_COUNT = 1
    make_user("alice", password="right-pw")

    def via_proxy(forwarded: str, password: str) -> int:
        client = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR=forwarded)
        return client.post("/login/", {"username": "alice", "password": password}).status_code

    for _ in range(3):
        via_proxy("203.0.113.7", "wrong")
    assert via_proxy("203.0.113.7", "right-pw") == 429
    assert via_proxy("198.51.100.1, 203.0.113.8", "right-pw") == 302, "the proxy saw another client"
    assert via_proxy("203.0.113.7, 203.0.113.8", "right-pw") == 302, "a spoofed left hop does not count"


def test_spraying_many_usernames_from_one_address_locks_that_address_only() -> None:
    make_user("victim", password="victim-pw")
    make_user("other", password="other-pw")
    sprayed = [attempt("/login/", f"user{n}", "Summer2026!", address="10.0.0.66") for n in range(6)]
    assert sprayed[:5] == [200] * 5, "each username failed once or twice: no pair lockout"
    assert sprayed[5] == 429, "the sixth failure from the address locks it"
    assert attempt("/login/", "victim", "victim-pw", address="10.0.0.66") == 429, "even a right password"
    assert attempt("/login/", "victim", "victim-pw", address="10.0.0.77") == 302, "another address logs in"


def test_a_login_to_an_own_account_does_not_clear_the_address_count() -> None:
    make_user("sprayer", password="sprayer-pw")
    for n in range(4):
        attempt("/login/", f"user{n}", "guess", address="10.0.0.66")
    assert attempt("/login/", "sprayer", "sprayer-pw", address="10.0.0.66") == 302
    assert [attempt("/login/", f"more{n}", "guess", address="10.0.0.66") for n in range(2)] == [200, 429]
