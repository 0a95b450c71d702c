"""`trainyard login --sso URL`: sign in through the portal, and so through its identity provider, from any
terminal. The portal runs the OAuth device authorization grant (RFC 8628) for its own API tokens: this asks
for a code, shows the user where to approve it (and opens a browser there unless told not to), then polls
until the user approves, denies, or the code expires; it returns the new API token."""

from __future__ import annotations

import platform
import time
import webbrowser
from collections.abc import Callable
from typing import Any

import httpx

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class DeviceLoginError(Exception):
    """The sign-in did not end with a token; the message says why."""


def _post(client: httpx.Client, path: str, data: dict[str, str]) -> tuple[int, dict[str, Any]]:
    try:
        response = client.post(path, data=data)
    except httpx.HTTPError as exc:
        raise DeviceLoginError(f"cannot reach {client.base_url}: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        raise DeviceLoginError(
            f"{client.base_url}{path} answered {response.status_code} without JSON: is it a Trainyard portal?"
        ) from None
    return response.status_code, body if isinstance(body, dict) else {}


def device_login(
    server: str,
    *,
    say: Callable[[str], None],
    open_browser: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Sign in at `server` by device code; returns the token answer (`access_token`, `scope`,
    `expires_at`). `say` shows the user what to do."""
    with httpx.Client(base_url=server, timeout=30.0) as client:
        status, start = _post(client, "/auth/device/", {"client_name": platform.node()[:60]})
        if status != 200 or "device_code" not in start:
            raise DeviceLoginError(f"{server} refused to start a sign-in ({status}: {start})")
        url = str(start.get("verification_uri_complete") or start["verification_uri"])
        say(f"To sign in, open {url}")
        say(f"and check that it shows the code {start['user_code']} (it expires in {start['expires_in']} s).")
        if open_browser:
            webbrowser.open(url)
        interval = float(start.get("interval") or 5)
        deadline = time.monotonic() + float(start["expires_in"])
        while time.monotonic() < deadline:
            sleep(interval)
            status, answer = _post(
                client,
                "/auth/device/token/",
                {"grant_type": DEVICE_GRANT, "device_code": start["device_code"]},
            )
            if status == 200 and answer.get("access_token"):
                return answer
            error = answer.get("error")
            if error == "authorization_pending":
                continue
            if error == "slow_down":
                interval = float(answer.get("interval") or interval + 5)
                continue
            if error == "access_denied":
                raise DeviceLoginError("the sign-in was denied in the browser")
            if error == "expired_token":
                break
            raise DeviceLoginError(f"{server} ended the sign-in: {error or status}")
        raise DeviceLoginError("the code expired before it was approved; run trainyard login --sso again")
