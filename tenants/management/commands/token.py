"""API tokens from the command line: `token create --user NAME [--name NAME] [--scope read|submit|admin]
[--expires-in-days N]` prints the new secret (and nothing else on stdout, so scripts can capture it),
`token list --user NAME`, `token revoke ID`."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tenants.models import ApiToken, TokenScope
from tenants.tokens import TokenRefused, token_create, token_live, token_revoke


def _user(username: str) -> User:
    user: User | None = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user named {username!r}")
    if not user.is_active:
        raise CommandError(f"user {username!r} is inactive; a token of theirs would not authenticate")
    return user


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


def _state(token: ApiToken) -> str:
    if token.revoked_at:
        return f"revoked {_when(token.revoked_at)}"
    if token.expires_at and token.expires_at <= timezone.now():
        return "expired"
    return "active"


class Command(BaseCommand):
    help = "Create, list or revoke a user's API tokens (Authorization: Bearer <token>)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{create,list,revoke}")
        create = actions.add_parser("create", help="Create a token; prints only its secret, shown this once.")
        create.add_argument("--user", required=True, help="The username the token acts as.")
        create.add_argument("--name", default="cli", help="A label to tell the token apart (default: cli).")
        create.add_argument(
            "--scope",
            choices=TokenScope.values,
            default=TokenScope.SUBMIT,
            help="read: safe methods only; submit (default): also job writes; admin: everything the user's "
            "role allows (tenant settings, secrets, notifications, tokens).",
        )
        create.add_argument(
            "--expires-in-days",
            type=int,
            default=None,
            metavar="N",
            help="Days until it stops working (default: API_TOKEN_DEFAULT_DAYS, 90; at most API_TOKEN_MAX_DAYS).",
        )
        create.add_argument(
            "--keep",
            metavar="FILE",
            default=None,
            help="Keep the secret in FILE (mode 0600) and print it again while it is the user's live token "
            "(`make up` prints one demo token across restarts); a new one replaces it once it is not.",
        )
        listing = actions.add_parser("list", help="List a user's tokens (never their secrets).")
        listing.add_argument("--user", required=True, help="The username.")
        revoke = actions.add_parser("revoke", help="Revoke a token at once, by its id.")
        revoke.add_argument("token_id", type=int, metavar="ID", help="The token's id (see `token list`).")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            if options["keep"] and self._kept(options["keep"], options["user"]):
                return
            secret = self._create(
                options["user"], options["name"], options["scope"], options["expires_in_days"]
            )
            if options["keep"]:
                self._keep(options["keep"], secret)
        elif action == "list":
            self._list(options["user"])
        else:
            self._revoke(options["token_id"])

    def _kept(self, path: str, username: str) -> bool:
        """Print the token kept in `path` again if it is still `username`'s live token."""
        try:
            secret = Path(path).read_text().strip()
        except OSError:
            return False
        token = token_live(secret) if secret else None
        if token is None or token.user.get_username() != username:
            return False
        self.stdout.write(secret)
        expiry = f"expires {_when(token.expires_at)}" if token.expires_at else "never expires"
        self.stderr.write(f"token {token.pk} ({token.name}, {expiry}) for {username}, kept in {path}")
        return True

    def _keep(self, path: str, secret: str) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secret + "\n")
        target.chmod(0o600)

    def _create(self, username: str, name: str, scope: str, days: int | None) -> str:
        name = name.strip()
        if not name or len(name) > 100:
            raise CommandError("--name must be 1 to 100 characters")
        if days is not None and days < 1:
            raise CommandError("--expires-in-days must be 1 or more")
        expires_at = timezone.now() + timedelta(days=days) if days is not None else None
        try:
            token, secret = token_create(user=_user(username), name=name, scope=scope, expires_at=expires_at)
        except TokenRefused as exc:
            option = "--expires-in-days" if exc.field == "expires_at" else f"--{exc.field}"
            raise CommandError(f"{option}: {exc}") from None
        self.stdout.write(secret)
        expiry = f"expires {_when(token.expires_at)}" if token.expires_at else "never expires"
        self.stderr.write(
            f"token {token.pk} ({name}, scope {scope}, {expiry}) for {username}; "
            "the secret is shown only this once"
        )
        return secret

    def _list(self, username: str) -> None:
        tokens = ApiToken.objects.filter(user=_user(username))
        rows = [
            (
                str(t.pk),
                t.name,
                t.scope,
                f"{t.prefix}…",
                _when(t.created_at),
                _when(t.last_used_at),
                _when(t.expires_at),
                _state(t),
            )
            for t in tokens
        ]
        header = ("ID", "NAME", "SCOPE", "PREFIX", "CREATED", "LAST USED", "EXPIRES", "STATE")
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write(
                "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            )

    def _revoke(self, token_id: int) -> None:
        token = ApiToken.objects.select_related("user").filter(pk=token_id).first()
        if token is None:
            raise CommandError(f"no token with id {token_id}")
        if token.revoked_at is not None:
            self.stderr.write(f"token {token_id} was already revoked")
            return
        token_revoke(token=token)
        self.stdout.write(f"revoked token {token_id} ({token.name}) of {token.user.username}")
