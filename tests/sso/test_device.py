"""The command line's sign-in by device code (RFC 8628 shape, tenants/device.py, portal/device_pages.py):
pending until approved, slow_down when polled too fast, one token per approval, expiry, denial."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tenants.device import device_decide
from tenants.models import ApiToken, DeviceAuthorization
from tenants.tokens import token_live
from tests.e2e.conftest import ROOT
from tests.factories import make_user

GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@pytest.fixture(autouse=True)
def _no_wait(settings: Any) -> None:
    settings.DEVICE_POLL_SECONDS = 0  # the tests poll at once; the slow_down test sets its own interval


def _start(client: Client) -> dict[str, Any]:
    answer = client.post("/auth/device/", {"client_name": "laptop"})
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


def _poll(client: Client, device_code: str) -> tuple[int, dict[str, Any]]:
    answer = client.post("/auth/device/token/", {"grant_type": GRANT, "device_code": device_code})
    return answer.status_code, answer.json()


@pytest.mark.django_db
def test_an_approved_code_gives_one_token_once() -> None:
    cli, browser = Client(), Client()
    start = _start(cli)
    assert set(start) == {
        "device_code",
        "user_code",
        "verification_uri",
        "verification_uri_complete",
        "expires_in",
        "interval",
    }
    assert start["verification_uri"] == "http://testserver/device/"
    assert start["verification_uri_complete"].endswith(f"?user_code={start['user_code']}")
    assert _poll(cli, start["device_code"]) == (400, {"error": "authorization_pending", "interval": 0})

    dana = make_user("dana")
    browser.force_login(dana)
    page = browser.get("/device/", {"user_code": start["user_code"].lower().replace("-", "")})
    assert page.status_code == 200 and start["user_code"] in page.content.decode()
    browser.post("/device/", {"user_code": start["user_code"], "action": "approve"})

    status, body = _poll(cli, start["device_code"])
    assert status == 200 and body["token_type"] == "Bearer" and body["scope"] == "submit"
    token = token_live(body["access_token"])
    assert token is not None and token.user == dana and token.name == "trainyard login --sso (laptop)"
    assert _poll(cli, start["device_code"]) == (400, {"error": "invalid_grant"})
    assert ApiToken.objects.filter(user=dana).count() == 1
    # Decided codes cannot be approved again.
    again = browser.post("/device/", {"user_code": start["user_code"], "action": "approve"}, follow=True)
    assert "expired or was decided already" in again.content.decode()


@pytest.mark.django_db
def test_polling_faster_than_the_interval_is_told_to_slow_down(settings: Any) -> None:
    settings.DEVICE_POLL_SECONDS = 30
    cli = Client()
    start = _start(cli)
    assert start["interval"] == 30
    assert _poll(cli, start["device_code"]) == (400, {"error": "authorization_pending", "interval": 30})
    assert _poll(cli, start["device_code"]) == (400, {"error": "slow_down", "interval": 35})
    assert _poll(cli, start["device_code"]) == (400, {"error": "slow_down", "interval": 40})


@pytest.mark.django_db
def test_a_denied_or_expired_code_gives_nothing() -> None:
    cli, browser = Client(), Client()
    browser.force_login(make_user("dana"))
    denied = _start(cli)
    browser.post("/device/", {"user_code": denied["user_code"], "action": "deny"})
    assert _poll(cli, denied["device_code"]) == (400, {"error": "access_denied"})

    late = _start(cli)
    DeviceAuthorization.objects.filter(user_code=late["user_code"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    page = browser.get("/device/", {"user_code": late["user_code"]})
    assert "expired or was decided already" in page.content.decode()
    assert browser.post("/device/", {"user_code": late["user_code"], "action": "approve"}).status_code == 302
    assert _poll(cli, late["device_code"]) == (400, {"error": "expired_token"})
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_the_token_endpoint_wants_the_device_grant_and_a_known_code() -> None:
    cli = Client()
    answer = cli.post("/auth/device/token/", {"grant_type": "password", "device_code": "x"})
    assert answer.status_code == 400 and answer.json()["error"] == "unsupported_grant_type"
    assert _poll(cli, "no-such-code") == (400, {"error": "invalid_grant"})


@pytest.mark.django_db
def test_the_approval_page_needs_a_signed_in_user() -> None:
    answer = Client().get("/device/", {"user_code": "BCDF-GHJK"})
    assert answer.status_code == 302 and answer["Location"].startswith("/login/?next=/device/")


@pytest.mark.django_db(transaction=True)
def test_the_command_line_says_so_when_the_sign_in_is_denied(
    live_server: Any, tmp_path: Any, settings: Any
) -> None:
    settings.DEVICE_POLL_SECONDS = 1
    env = os.environ | {"HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("TRAINYARD_TOKEN", None)
    cli = subprocess.Popen(
        [sys.executable, "-m", "trainyard", "login", "--sso", live_server.url, "--no-browser"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cli.stderr is not None
        first = cli.stderr.readline()
        code = cli.stderr.readline().split("the code ")[1].split(" ")[0]
        assert first.strip() == f"To sign in, open {live_server.url}/device/?user_code={code}"
        assert device_decide(user_code=code, user=make_user("dana"), approve=False) is not None
        _, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 1
    assert "login failed: the sign-in was denied in the browser" in err
    assert not (tmp_path / ".config" / "trainyard" / "config.json").exists()


def test_sso_and_a_token_together_are_refused() -> None:
    from typer.testing import CliRunner

    from trainyard import cli

    result = CliRunner().invoke(
        cli.app, ["login", "--sso", "http://127.0.0.1:9", "--token", "ty_x"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2
    assert "--sso gets a new token: leave --token out" in result.output


@pytest.mark.django_db
def test_one_address_holds_only_so_many_waiting_codes(settings: Any) -> None:
    settings.DEVICE_CODES_PER_ADDRESS = 2
    cli = Client()
    first, _second = _start(cli), _start(cli)
    refused = cli.post("/auth/device/", {"client_name": "laptop"})
    assert refused.status_code == 429
    assert refused.json() == {
        "error": "slow_down",
        "error_description": "2 sign-ins from this address wait already",
    }
    assert Client(REMOTE_ADDR="10.0.0.9").post("/auth/device/").status_code == 200  # another address
    DeviceAuthorization.objects.filter(user_code=first["user_code"]).update(expires_at=timezone.now())
    assert cli.post("/auth/device/").status_code == 200  # one expired: room again
    DeviceAuthorization.objects.filter(user_code=first["user_code"]).update(
        expires_at=timezone.now() - timedelta(days=2)
    )
    _start(Client(REMOTE_ADDR="10.0.0.10"))
    assert not DeviceAuthorization.objects.filter(user_code=first["user_code"]).exists()  # long expired: gone
