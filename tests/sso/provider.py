"""The SSO tests' OpenID provider: tests/oidc/provider.mjs (panva's oidc-provider on Node.js) in a process of
its own on a free port, with users and groups in a JSON file a test rewrites (read again at every sign-in)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlparse

import httpx

ROOT = Path(__file__).resolve().parents[2]
PROVIDER_DIR = ROOT / "tests" / "oidc"
CLIENT_ID = "trainyard"
CLIENT_SECRET = "test-client-secret"
SHORT_CLIENT_ID = "trainyard-short"  # its ID tokens expire a second after they are issued


def provider_missing() -> str:
    """Why the provider cannot run here ('' when it can)."""
    if shutil.which("node") is None:
        return "node is not installed (Node.js 20 runs the test OpenID provider)"
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        return "tests/oidc/node_modules is missing: `make tools` installs it (npm ci)"
    return ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Provider:
    """A running test provider: its issuer URL and its users file."""

    issuer: str
    users_file: Path

    def set_user(self, username: str, *, groups: list[str], password: str = "idp-pw") -> None:  # noqa: S107
        """Create or change a user of the provider (its next sign-in sees the change)."""
        users = json.loads(self.users_file.read_text())
        users[username] = {"password": password, "email": f"{username}@idp.example.org", "groups": groups}
        tmp = self.users_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(users))
        tmp.replace(self.users_file)

    def discovery(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(f"{self.issuer}/.well-known/openid-configuration").json()
        return answer

    def id_token(self, username: str, *, client_id: str = CLIENT_ID) -> str:
        """A real ID token for `username`, by the code flow with PKCE as a relying party runs it (no
        browser: the provider's sign-in form is posted directly)."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        redirect_uri = "http://127.0.0.1:9/callback"
        query = {
            "client_id": client_id,
            "response_type": "code",
            "scope": "openid email profile groups",
            "redirect_uri": redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "s",
            "nonce": "n",
        }
        back = provider_sign_in(self, f"{self.issuer}/auth?{urlencode(query)}", username, redirect_uri)
        code = parse_qs(urlparse(back).query)["code"][0]
        with httpx.Client(base_url=self.issuer) as client:
            tokens = client.post(
                "/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": redirect_uri,
                    "client_id": client_id,
                    "client_secret": CLIENT_SECRET,
                    "code_verifier": verifier,
                },
            )
            assert tokens.status_code == 200, tokens.text
            return str(tokens.json()["id_token"])


def provider_sign_in(provider: Provider, authorize_url: str, username: str, back_to: str) -> str:
    """Sign `username` in at the provider, as their browser would, from the relying party's authorization
    URL; returns the URL the provider sends the browser back to (starting with `back_to`)."""
    users = json.loads(provider.users_file.read_text())
    with httpx.Client(base_url=provider.issuer, follow_redirects=False) as client:
        answer = client.get(authorize_url)
        form = client.get(answer.headers["location"])
        uid = re.search(r"/interaction/([^/\"]+)/login", form.text)
        assert uid, form.text
        answer = client.post(
            f"/interaction/{uid.group(1)}/login",
            data={"login": username, "password": users[username]["password"]},
        )
        while not answer.headers["location"].startswith(back_to):
            answer = client.get(urljoin(provider.issuer, answer.headers["location"]))
        return str(answer.headers["location"])


@contextmanager
def oidc_provider(workdir: Path) -> Iterator[Provider]:
    """The provider on a free port, stopped on exit; ready once it serves its discovery document."""
    port = _free_port()
    users_file = workdir / "users.json"
    users_file.write_text("{}")
    clients = [
        {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET},
        {"client_id": SHORT_CLIENT_ID, "client_secret": CLIENT_SECRET, "id_token_ttl": 1},
    ]
    env = os.environ | {
        "OIDC_PORT": str(port),
        "OIDC_USERS_FILE": str(users_file),
        "OIDC_CLIENTS": json.dumps(clients),
    }
    log = (workdir / "oidc-provider.log").open("wb")
    process = subprocess.Popen(
        ["node", str(PROVIDER_DIR / "provider.mjs")], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the OpenID provider exited ({process.returncode}); see {log.name}")
            try:
                if httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the OpenID provider did not answer within 30 s; see {log.name}"
                    ) from None
                time.sleep(0.1)
        yield Provider(issuer=issuer, users_file=users_file)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
