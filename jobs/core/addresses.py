"""Whether a host is on the public internet, judged by its addresses (pure: resolution is injected).

A host's form alone does not tell: `127.1`, `0177.0.0.1`, `127.000.000.001`, `0x7f.0.0.1` and `10.1` are all
numeric forms of private addresses that C's `inet_aton` (and so every resolver and HTTP client built on it)
accepts, and names like `kubernetes.default` or `minio.minio` resolve to cluster addresses inside a cluster.
So every numeric form is read as `inet_aton` reads it, and a name is resolved (by the caller's resolver:
getaddrinfo on the Django side, a fake in pure tests) and refused if any one of its addresses is not global.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence

Resolve = Callable[[str], Sequence[str]]
"""A host's addresses as text (every one getaddrinfo gives), [] when it does not resolve."""

# Names that only mean something inside a cluster or on a local network: refused without asking DNS.
INTERNAL_SUFFIXES = (
    ".localhost", ".local", ".localdomain", ".internal", ".svc", ".cluster.local", ".home.arpa",
)  # fmt: skip


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def is_public_address(address: str) -> bool:
    """Whether an IP address (text, an IPv6 zone allowed) is global unicast: not private, loopback,
    link-local, shared (100.64/10), reserved or multicast; an IPv6 address that carries an IPv4 one (mapped,
    6to4, Teredo, NAT64's 64:ff9b::/96) only if that one is too."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if any(inner is not None and not is_public_address(str(inner)) for inner in embedded):
            return False
        if ip.ipv4_mapped is not None:
            return True
    return ip.is_global and not ip.is_multicast


def numeric_address(host: str) -> str | None:
    """The address a numeric host stands for, as a resolver reads it (`127.1` is 127.0.0.1, `0x7f.1` and
    `0177.0.0.1` too, `2130706433` as well), or None for a name."""
    host = host.strip("[]")
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        pass
    if not host or not all(c in "0123456789abcdefxABCDEFX." for c in host) or not host[0].isdigit():
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None


def host_problem(host: str, resolve: Resolve) -> str | None:
    """Why ``host`` is not a public host, naming the address at fault; None when every address it has is
    global. A name that does not resolve is refused too: what the platform cannot resolve, it cannot check."""
    host = host.strip("[]").lower().rstrip(".")
    if not host:
        return "names no host"
    address = numeric_address(host)
    if address is not None:
        addresses: Sequence[str] = [address]
    elif "." not in host or host.endswith(INTERNAL_SUFFIXES) or host in ("localhost",):
        return f"{host} is a cluster-internal or local name, which is not a public address"
    else:
        addresses = resolve(host)
        if not addresses:
            return f"{host} does not resolve, so it cannot be checked as a public address"
    private = [a for a in dict.fromkeys(addresses) if not is_public_address(a)]
    if not private:
        return None
    shown = host if address is None or address == host else f"{host} ({address})"
    if address is not None:
        return f"{shown} is not a public address"
    which = "which is not a public address" if len(private) == 1 else "which are not public addresses"
    return f"{shown} resolves to {', '.join(private)}, {which}"
