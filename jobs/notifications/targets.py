"""Where webhooks may go: http(s) URLs whose host resolves only to public addresses, unless
NOTIFY_ALLOW_PRIVATE_TARGETS allows private, loopback and link-local ones (test settings only).

The check runs twice: when a subscription is created (a field error), and at delivery inside the connection
itself (`GuardedBackend`), which resolves the host, refuses any non-public address and connects to the
address it checked, so a name that changes its answer in between (DNS rebinding) reaches nothing private."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
from django.conf import settings

from jobs.core.addresses import is_public_address

MAX_URL_LENGTH = 2000


class TargetRefused(ValueError):
    """A webhook URL the platform will not call; the message says why, for a field error."""


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (an address resolves to itself); TargetRefused if it does not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"{host} does not resolve ({exc})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check_addresses(host: str, addresses: Iterable[str]) -> None:
    """Refuse `host` if any of its addresses is private, loopback, link-local or otherwise not public."""
    if settings.NOTIFY_ALLOW_PRIVATE_TARGETS:
        return
    private = [a for a in addresses if not is_public_address(a)]
    if private:
        raise TargetRefused(
            f"{host} resolves to {', '.join(private)}: private, loopback and link-local addresses are not "
            "allowed as webhook targets"
        )


def check_url(url: str) -> str:
    """The URL, stripped, if webhooks may be sent there; TargetRefused (with the reason) otherwise."""
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise TargetRefused(f"at most {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise TargetRefused("must be an http:// or https:// URL")
    host = parts.hostname
    if not host:
        raise TargetRefused("must name a host, as in https://hooks.example.com/trainyard")
    if parts.username or parts.password:
        raise TargetRefused("must not carry a user name or password")
    port = port or (443 if parts.scheme == "https" else 80)
    check_addresses(host, resolve(host, port))
    return url


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's network backend, resolving each host itself: every address it resolves to must pass
    `check_addresses`, and the connection goes to the first of those checked addresses that answers (TLS
    still verifies the certificate against the host's name, which httpcore passes separately)."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = resolve(host, port)
        check_addresses(host, addresses)
        for address in addresses[:-1]:  # the next one when an address cannot be reached (no IPv6 route)
            try:
                return self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError:
                continue
        return self._inner.connect_tcp(addresses[-1], port, timeout, local_address, socket_options)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise TargetRefused("webhooks never go to a Unix socket")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
