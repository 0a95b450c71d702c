"""Private registries: hosts whose images the kubelet pulls only with a matching pull secret.

kubesim pulls no image (a container's command runs as a local process), so by default every image "pulls".
A host made private (``--private-registry HOST[=USER:PASSWORD]``, ``Cluster(private_registries=...)`` or
``KubeSim.add_private_registry``) behaves as a registry that answers 401 to anonymous pulls: a container whose
image is on it starts only when the pod names, in ``imagePullSecrets``, a ``kubernetes.io/dockerconfigjson``
(or legacy ``kubernetes.io/dockercfg``) Secret of its namespace with an entry for the host (and, when the host
was given a username and password, with those); otherwise it waits in ErrImagePull, then ImagePullBackOff,
as under a real kubelet.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]
DOCKER_CONFIG_JSON = ("kubernetes.io/dockerconfigjson", ".dockerconfigjson")
DOCKER_CFG = ("kubernetes.io/dockercfg", ".dockercfg")
_HUB = "docker.io"
_HUB_ALIASES = frozenset({"index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"})


def image_host(image: str) -> str:
    """The registry host of an image reference, as a container runtime reads it (`python:3.11`: docker.io)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return _normal(first)
    return _HUB


def _normal(host: str) -> str:
    host = host.strip().lower()
    return _HUB if host in _HUB_ALIASES else host


def _key_host(key: str) -> str:
    """The host of a docker config `auths` key: `registry.example.com`, `https://registry.example.com/v1/`."""
    rest = key.split("://", 1)[1] if "://" in key else key
    return _normal(rest.split("/", 1)[0])


def parse_registry(text: str) -> tuple[str, tuple[str, str] | None]:
    """``HOST`` or ``HOST=USER:PASSWORD`` (the command line's form) as (host, (user, password) or None)."""
    host, eq, login = text.partition("=")
    if not host.strip() or "/" in host:
        raise ValueError(f"{text!r}: expected HOST or HOST=USER:PASSWORD (a host without scheme or path)")
    if not eq:
        return _normal(host), None
    user, colon, password = login.partition(":")
    if not colon or not user:
        raise ValueError(f"{text!r}: expected HOST=USER:PASSWORD")
    return _normal(host), (user, password)


def _logins(secret: Obj) -> dict[str, tuple[str, str]]:
    """The registries a pull secret has credentials for: host -> (username, password); {} when malformed."""
    kind = secret.get("type")
    key = next((k for t, k in (DOCKER_CONFIG_JSON, DOCKER_CFG) if t == kind), None)
    raw = (secret.get("data") or {}).get(key or "")
    if not raw:
        return {}
    try:
        config = json.loads(base64.b64decode(raw))
    except ValueError:
        return {}
    auths = config.get("auths") if kind == DOCKER_CONFIG_JSON[0] else config
    if not isinstance(auths, dict):
        return {}
    found: dict[str, tuple[str, str]] = {}
    for name, entry in auths.items():
        if not isinstance(entry, dict):
            continue
        user, password = str(entry.get("username") or ""), str(entry.get("password") or "")
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
            except ValueError:
                continue
        found[_key_host(str(name))] = (user, password)
    return found


def secret_causes(secret: Obj) -> list[tuple[str, str, str]]:
    """What the apiserver refuses in a docker config Secret (after `stringData` moved into `data`): its key
    missing, or not JSON (the value redacted, as the apiserver does)."""
    kind = secret.get("type")
    key = next((k for t, k in (DOCKER_CONFIG_JSON, DOCKER_CFG) if t == kind), None)
    if key is None:
        return []
    raw = (secret.get("data") or {}).get(key)
    field = f"data[{key}]"
    if not raw:
        return [(field, "FieldValueRequired", "Required value")]
    try:
        json.loads(base64.b64decode(raw))
    except ValueError as exc:
        return [(field, "FieldValueInvalid", f'Invalid value: "<secret contents redacted>": {exc}')]
    return []


class PrivateRegistries:
    """The registry hosts that refuse anonymous pulls, each with the login it accepts (None: any login the
    pod's pull secret holds for the host)."""

    def __init__(self, entries: Mapping[str, tuple[str, str] | None] | Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[str, tuple[str, str] | None] = {}
        if isinstance(entries, Mapping):
            for host, login in entries.items():
                self.add(host, login)
        else:
            for text in entries:
                self.add(*parse_registry(text))

    def add(self, host: str, login: tuple[str, str] | None = None) -> None:
        """Make `host` private (accepting only `login` when given)."""
        with self._lock:
            self._hosts[_normal(host)] = tuple(login) if login is not None else None  # type: ignore[assignment]

    def remove(self, host: str | None = None) -> None:
        """Make `host` (or every host) public again."""
        with self._lock:
            if host is None:
                self._hosts.clear()
            else:
                self._hosts.pop(_normal(host), None)

    def hosts(self) -> dict[str, bool]:
        """The private hosts, each with whether it checks a particular login."""
        with self._lock:
            return {host: login is not None for host, login in self._hosts.items()}

    def pull_error(self, image: str, secrets: Iterable[Obj]) -> str | None:
        """Why `image` cannot be pulled with the pod's pull `secrets` (None: it pulls)."""
        host = image_host(image)
        with self._lock:
            if host not in self._hosts:
                return None
            wanted = self._hosts[host]
        logins = [login for secret in secrets for h, login in _logins(secret).items() if h == host]
        reference = f'failed to resolve reference "{image}"'
        if not logins:
            return (
                f"{reference}: pull access denied, repository does not exist or may require authorization: "
                f"server message: 401 Unauthorized: authentication required (no pull secret for {host})"
            )
        if wanted is not None and wanted not in logins:
            return f"{reference}: 401 Unauthorized: incorrect username or password for {host}"
        return None
