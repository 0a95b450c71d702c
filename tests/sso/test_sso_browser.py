"""Single sign-on in a real browser against a real OpenID provider (tests/oidc): a user the provider puts in
a group lands in the tenant the group maps to, loses it when the group goes, and a command line signs in by
device code approved in the browser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import User

from tenants.models import ApiToken, Membership, MembershipEvent
from tests.e2e.conftest import ROOT, screenshot
from tests.factories import make_tenant, member
from tests.sso.conftest import sso_login
from tests.sso.provider import Provider

pytestmark = pytest.mark.slow


def _status(page: Any, path: str) -> int:
    response = page.goto(path)
    assert response is not None
    return int(response.status)


def test_sign_in_lands_in_the_mapped_tenant_and_a_removed_group_removes_it(
    page: Any, provider: Provider
) -> None:
    vision = make_tenant("vision")
    make_tenant("nlp")
    member(vision, "owner", username="olga")
    provider.set_user("alice", groups=["ml-vision", "unmapped-group"])

    sso_login(page, "alice")
    alice = User.objects.get(username="alice")
    assert alice.email == "alice@idp.example.org"
    assert not alice.has_usable_password()
    assert Membership.objects.get(tenant=vision, user=alice).role == "member"
    assert not Membership.objects.filter(user=alice).exclude(tenant=vision).exists()
    added = MembershipEvent.objects.get(tenant=vision, username="alice")
    assert (added.action, added.role, added.actor) == ("added", "member", None)

    page.goto("/jobs/")
    assert page.locator("#jobs-list").get_attribute("data-tenant") == "vision"
    assert page.locator("h1").inner_text() == "Jobs in Team vision"
    assert _status(page, "/tenants/vision/") == 200
    assert _status(page, "/tenants/nlp/") == 404
    screenshot(page, "sso-signed-in.png")

    # The provider moves alice from ml-vision to the admins' group: owner at her next sign-in.
    provider.set_user("alice", groups=["ml-vision-admins"])
    page.context.clear_cookies()
    sso_login(page, "alice")
    assert Membership.objects.get(tenant=vision, user=alice).role == "owner"

    # Out of every group: she logs out (of the portal, then of the provider, which sends her back to the
    # login page) and signs in again, with her password at the provider: the tenant is gone.
    provider.set_user("alice", groups=[])
    page.click("form[action='/logout/'] button")
    page.wait_for_url(lambda url: url.startswith(provider.issuer))
    page.click("button[data-action=idp-sign-out]")
    page.wait_for_url(lambda url: "/login/" in url)
    assert _status(page, "/tokens/") == 200 and "/login/" in page.url  # signed out of the portal
    page.click("button[data-action=sso][data-provider=testidp]")
    page.wait_for_url(lambda url: "/interaction/" in url)  # the provider asks again: its session ended
    sso_login(page, "alice")
    assert not Membership.objects.filter(tenant=vision, user=alice).exists()
    assert _status(page, "/tenants/vision/") == 404
    actions = list(
        MembershipEvent.objects.filter(tenant=vision, username="alice")
        .order_by("pk")
        .values_list("action", "role")
    )
    assert actions == [("added", "member"), ("role_changed", "owner"), ("removed", "")]


def test_the_last_owner_keeps_the_role_the_groups_take_away(page: Any, provider: Provider) -> None:
    vision = make_tenant("vision")
    provider.set_user("ruth", groups=["ml-vision-admins"])
    sso_login(page, "ruth")
    ruth = User.objects.get(username="ruth")
    assert Membership.objects.get(tenant=vision, user=ruth).role == "owner"

    provider.set_user("ruth", groups=["ml-vision"])
    page.context.clear_cookies()
    sso_login(page, "ruth")
    assert Membership.objects.get(tenant=vision, user=ruth).role == "owner"  # the tenant's only owner

    member(vision, "owner", username="olga")
    page.context.clear_cookies()
    sso_login(page, "ruth")
    assert Membership.objects.get(tenant=vision, user=ruth).role == "member"


def test_the_command_line_signs_in_by_device_code_approved_in_the_browser(
    page: Any, provider: Provider, sso_server_url: str, tmp_path: Any
) -> None:
    vision = make_tenant("vision")
    provider.set_user("carl", groups=["ml-vision"])
    env = os.environ | {"HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("TRAINYARD_TOKEN", None)
    env.pop("TRAINYARD_URL", None)
    cli = subprocess.Popen(
        [sys.executable, "-m", "trainyard", "login", "--sso", sso_server_url, "--no-browser"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cli.stderr is not None
        first = cli.stderr.readline()
        second = cli.stderr.readline()
        assert first.startswith("To sign in, open "), first
        url = first.removeprefix("To sign in, open ").strip()
        code = second.split("the code ")[1].split(" ")[0]
        page.goto(url)
        page.wait_for_url(lambda u: "/login/" in u)
        sso_login(page, "carl")  # back at the device page once signed in
        assert page.locator("[data-testid=user-code]").inner_text().strip() == code
        screenshot(page, "sso-device-approve.png")
        page.click("button[data-action=approve-device]")
        page.locator(".msg-success", has_text="The command line is signed in").wait_for()
        out, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, err
    assert "logged in to" in out and "vision" in out
    carl = User.objects.get(username="carl")
    token = ApiToken.objects.get(user=carl)
    assert token.scope == "submit" and token.expires_at is not None
    secret = json.loads((tmp_path / ".config" / "trainyard" / "config.json").read_text())["token"]
    url = f"{sso_server_url}/api/v1/tenants/"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (the test server)
        slugs = [t["slug"] for t in json.loads(response.read())]
    assert slugs == [vision.slug]
    # The device code is spent: the same approval gives no second token.
    assert ApiToken.objects.filter(user=carl).count() == 1


def test_with_local_passwords_off_only_the_provider_signs_in(
    browser: Any, sso_only_server_url: str, provider: Provider, transactional_db: None
) -> None:
    from tests.e2e.conftest import open_page
    from tests.factories import make_user

    make_user("bob")  # password "pw"
    provider.set_user("bob", groups=[])  # the provider's bob, not the local one
    with open_page(browser, sso_only_server_url) as page:
        page.goto("/login/")
        assert page.locator("[data-testid=password-login]").count() == 0
        assert page.locator("button[data-action=sso]").count() == 1
        screenshot(page, "sso-only-login.png")
        # A password POST made anyway (with the page's CSRF token) is refused, right as it is.
        status = page.evaluate("""async () => {
            const token = document.querySelector('input[name=csrfmiddlewaretoken]').value;
            const body = new URLSearchParams({csrfmiddlewaretoken: token, username: 'bob', password: 'pw'});
            const r = await fetch('/login/', {method: 'POST', body, redirect: 'manual'});
            return r.status; }""")
        assert status == 403
        assert _status(page, "/tokens/") == 200 and "/login/" in page.url  # still signed out
        sso_login(page, "bob")
        local, sso = User.objects.get(username="bob"), User.objects.exclude(username="bob").get()
        assert sso.username.startswith("bob") and sso.email == "bob@idp.example.org"
        assert SocialAccount.objects.get(user=sso).uid == "bob"
        assert not SocialAccount.objects.filter(user=local).exists()
        assert _status(page, "/tokens/") == 200 and "/tokens/" in page.url
