"""Where webhooks may go: http(s) URLs whose host resolves only to public addresses, or to addresses the
operator allowed in NOTIFY_ALLOWED_TARGETS (an on-prem chat server, an internal incident service), unless
NOTIFY_ALLOW_PRIVATE_TARGETS allows every private, loopback and link-local one (test settings only).

NOTIFY_ALLOWED_TARGETS lists CIDRs (`10.20.0.0/16`, `fd00:1::/64`, a single address) and host names
(`chat.corp.example`, or `*.corp.example` for its subdomains). An address inside a listed CIDR is allowed; a
listed host may resolve to private addresses (RFC 1918, unique-local) but still not to loopback, link-local
(cloud metadata) or unspecified ones unless a CIDR names them too.

The check runs twice: when a subscription is created (a field error), and at delivery inside the connection
itself (`GuardedBackend`), which resolves the host, refuses any non-public address and connects to the
address it checked, so a name that changes its answer in between (DNS rebinding) reaches nothing private."""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AllowList:
    """NOTIFY_ALLOWED_TARGETS, parsed: networks, exact host names and `*.` suffixes (lower case)."""

    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    def names(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.hosts or any(host.endswith(suffix) for suffix in self.suffixes)

    def covers(self, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        return any(ip.version == net.version and ip in net for net in self.networks)


@functools.cache
def parse_allowed_targets(entries: Sequence[str]) -> AllowList:
    """The allow-list from its entries; ValueError naming a bad one (`jobs.checks` reports it at start)."""
    networks: list[Network] = []
    hosts: set[str] = set()
    suffixes: list[str] = []
    for raw in entries:
        entry = raw.strip().lower().rstrip(".")
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        name = entry.removeprefix("*.")
        labels = name.split(".")
        if "/" in entry or not all(label and label.replace("-", "").isalnum() for label in labels):
            raise ValueError(f"{raw!r} is neither a CIDR nor a host name (or *.domain)")
        if entry.startswith("*."):
            suffixes.append("." + name)
        else:
            hosts.add(name)
    return AllowList(tuple(networks), frozenset(hosts), tuple(suffixes))


def allowed_targets() -> AllowList:
    return parse_allowed_targets(tuple(settings.NOTIFY_ALLOWED_TARGETS))


def _never_by_name(address: str) -> bool:
    """Loopback, link-local (cloud metadata), unspecified and multicast addresses: a listed host name does
    not open these, only a listed CIDR does."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    ip = mapped or ip
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast


def check_addresses(host: str, addresses: Iterable[str]) -> None:
    """Refuse `host` if any of its addresses is private, loopback, link-local or otherwise not public, and
    not allowed by NOTIFY_ALLOWED_TARGETS."""
    if settings.NOTIFY_ALLOW_PRIVATE_TARGETS:
        return
    allowed = allowed_targets()
    named = allowed.names(host)
    refused = [
        a
        for a in addresses
        if not is_public_address(a) and not allowed.covers(a) and not (named and not _never_by_name(a))
    ]
    if refused:
        raise TargetRefused(
            f"{host} resolves to {', '.join(refused)}: private, loopback and link-local addresses are not "
            "allowed as webhook targets (an administrator can allow hosts and networks in "
            "NOTIFY_ALLOWED_TARGETS)"
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
