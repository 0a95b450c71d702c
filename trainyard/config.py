"""Where the CLI keeps the server URL and API token, and how the effective pair is chosen.

The file is `~/.config/trainyard/config.json` (mode 0600, in a 0700 directory). For each value the
first of these wins: the `--url`/`--token` option, the `TRAINYARD_URL`/`TRAINYARD_TOKEN` environment
variable, the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

URL_ENV = "TRAINYARD_URL"
TOKEN_ENV = "TRAINYARD_TOKEN"  # noqa: S105 - the name of a variable, not a secret


@dataclass(frozen=True)
class Settings:
    """The server to talk to and the token to present (either may be missing)."""

    url: str | None = None
    token: str | None = None


def config_path() -> Path:
    """The config file of the current user (under `$HOME`)."""
    return Path.home() / ".config" / "trainyard" / "config.json"


def load(path: Path | None = None) -> Settings:
    """The stored settings; an absent or unreadable file reads as empty."""
    path = path or config_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Settings()
    if not isinstance(data, dict):
        return Settings()
    url, token = data.get("url"), data.get("token")
    return Settings(
        url=url if isinstance(url, str) else None, token=token if isinstance(token, str) else None
    )


def save(settings: Settings, path: Path | None = None) -> Path:
    """Write the settings, readable by the owner only (the token is a secret); returns the path."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = json.dumps({"url": settings.url, "token": settings.token}, indent=2) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(body)
    os.chmod(tmp, 0o600)  # an existing file keeps its old mode through os.open
    os.replace(tmp, path)
    return path


def forget_token(path: Path | None = None) -> bool:
    """Drop the stored token, keeping the URL; True if there was one."""
    path = path or config_path()
    stored = load(path)
    if stored.token is None:
        return False
    if stored.url:
        save(Settings(url=stored.url), path)
    else:
        path.unlink(missing_ok=True)
    return True


def normalize_url(url: str) -> str:
    """The server's base URL without a trailing slash (`http://` added when no scheme is given)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url


def resolve(url: str | None = None, token: str | None = None, path: Path | None = None) -> Settings:
    """The effective settings: options first, then the environment, then the config file."""
    stored = load(path)
    chosen_url = url or os.environ.get(URL_ENV) or stored.url
    chosen_token = token or os.environ.get(TOKEN_ENV) or stored.token
    return Settings(url=normalize_url(chosen_url) if chosen_url else None, token=chosen_token or None)
