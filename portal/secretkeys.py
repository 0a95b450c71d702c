"""The installation's own secrets: made once per machine for `make up`, refused in production when weak.

No key is shared between installations: a key written in the repository is public, and with it anyone can
sign sessions, password-reset links and pod tokens, or unseal stored data-store credentials. Local
settings read `var/secrets.env` (made at the first start, mode 0600; the environment still wins);
production settings refuse a SECRET_KEY that is short, repetitive or one of the known public ones.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

from cryptography.fernet import Fernet

MIN_LENGTH = 50
MIN_UNIQUE = 5
# Keys that were ever written in this repository or in Django's project template.
KNOWN_KEYS = frozenset({"local-insecure-key-do-not-use-in-production", "test-key-not-secret"})
KNOWN_PREFIXES = ("django-insecure-",)
_NAMES = {"SECRET_KEY", "CREDENTIALS_KEY"}


def weak_secret_key(key: str) -> str | None:
    """Why ``key`` may not sign anything in production (Django's own `security.W009` rule plus the keys
    known to be public), or None when it is fit."""
    if key in KNOWN_KEYS or key.startswith(KNOWN_PREFIXES):
        return "it is a publicly known key"
    if len(key) < MIN_LENGTH:
        return f"it is shorter than {MIN_LENGTH} characters"
    if len(set(key)) < MIN_UNIQUE:
        return f"it has fewer than {MIN_UNIQUE} different characters"
    return None


def _fresh() -> dict[str, str]:
    return {
        "SECRET_KEY": secrets.token_urlsafe(64),
        "CREDENTIALS_KEY": Fernet.generate_key().decode(),
    }


def _parse(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            values[name.strip()] = value.strip()
    return values


def _stored(path: Path) -> dict[str, str]:
    try:
        return _parse(path.read_text())
    except FileNotFoundError:
        return {}


def local_secrets(path: Path) -> dict[str, str]:
    """The secrets kept in ``path`` (``NAME=value`` lines), made with random values and written with mode
    0600 the first time; a name missing from an older file is added. Safe when several processes start at
    once: they take turns on a lock file beside it, so the first writer wins and the others read what it
    wrote (a complete file is never replaced)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = _stored(path)
    if stored.keys() >= _NAMES:
        return stored
    lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stored = _stored(path)  # written by another process while this one waited
        if stored.keys() >= _NAMES:
            return stored
        wanted = _fresh() | stored
        staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(
                "# Made by Trainyard at the first start; keep it private. Removing it signs everyone out\n"
            )
            out.write("# and makes stored data-store credentials unreadable.\n")
            out.write("".join(f"{name}={value}\n" for name, value in wanted.items()))
        os.replace(staging, path)
        return _stored(path)
    finally:
        os.close(lock)  # releases the lock


if __name__ == "__main__":
    import sys

    local_secrets(Path(sys.argv[1]))
