"""Bearer-token authentication, as kube-apiserver with ``--anonymous-auth=false`` and a static token file.

kubesim has one user: whoever holds the token it keeps in ``STATE/token`` (made at the first start, kept
across restarts, mode 0600) and writes into its kubeconfig. A request without ``Authorization: Bearer
<token>``, or with another token, gets 401 ``Unauthorized`` on every path (discovery, ``/healthz``,
``/version``, OpenAPI and the ``/kubesim/`` admin endpoints alike), as the apiserver answers once anonymous
requests are off. There is no RBAC: the token may do everything.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from kubesim.errors import ApiError

TOKEN_FILE = "token"  # noqa: S105 - a file name


def load_or_create_token(state_dir: Path) -> str:
    """The state dir's token, made (32 random bytes, URL-safe) and stored with mode 0600 when there is none."""
    path = Path(state_dir) / TOKEN_FILE
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if token:
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


def authenticated(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (the scheme is case-insensitive, as the
    apiserver's bearer authenticator reads it); compared in constant time."""
    scheme, _, given = (header or "").strip().partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(given.encode(), token.encode())


def unauthorized() -> ApiError:
    """The apiserver's 401 for a request no authenticator accepted."""
    return ApiError(401, "Unauthorized", "Unauthorized")
