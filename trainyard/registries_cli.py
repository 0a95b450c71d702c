"""`trainyard registries`: a tenant's private registry credentials (image pull logins): members list them and
their audit, owners add, rotate and delete them (a client of `/api/v1/tenants/<slug>/registries/` only).

The password is never a command-line argument (shell history, `ps`): it is asked for without echo, or read
from standard input with `--password-stdin` (as `docker login` does). No answer ever carries it back.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from trainyard.output import console, emit_json, table, when

registries_app = typer.Typer(
    help="Your tenants' private registry credentials; owners add, rotate and delete them.",
    no_args_is_help=True,
)
TenantArg = Annotated[str, typer.Argument(metavar="TENANT", help="The tenant's slug.", show_default=False)]
NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="The credential's name in the tenant.", show_default=False)
]
UsernameOpt = Annotated[
    str,
    typer.Option("--username", "-u", help="The registry login (user or robot account).", show_default=False),
]
PasswordStdinOpt = Annotated[
    bool,
    typer.Option(
        "--password-stdin",
        help="Read the password or access token from standard input instead of asking for it.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="The server's answer as JSON.")]


def _client(ctx: typer.Context) -> Any:
    from trainyard.cli import client

    return client(ctx)


def _password(from_stdin: bool) -> str:
    """The password: all of standard input less its final line break, or typed at a prompt without echo."""
    if from_stdin:
        return sys.stdin.read().rstrip("\r\n")
    return str(typer.prompt("Password or token", hide_input=True))


def _by(stamp: str | None, user: str | None) -> str:
    return f"{when(stamp)} by {user or '-'}" if stamp else "-"


@registries_app.command("list")
def registries_list(ctx: typer.Context, tenant: TenantArg, as_json: JsonOpt = False) -> None:
    """List a tenant's registry credentials: name, host and username (never the password)."""
    rows = _client(ctx).registries(tenant)
    if as_json:
        emit_json(rows)
        return
    grid = table("NAME", "HOST", "USERNAME", "CREATED", "ROTATED")
    for row in rows:
        grid.add_row(
            row["name"],
            row["host"],
            row["username"],
            _by(row["created_at"], row.get("created_by")),
            _by(row.get("rotated_at"), row.get("rotated_by")),
        )
    console().print(grid)


@registries_app.command("add")
def registries_add(
    ctx: typer.Context,
    tenant: TenantArg,
    name: NameArg,
    host: Annotated[
        str,
        typer.Option(
            help="The registry host (and port) images name, e.g. registry.example.com.", show_default=False
        ),
    ],
    username: UsernameOpt,
    password_stdin: PasswordStdinOpt = False,
) -> None:
    """Store pull credentials for a registry host (owners); jobs whose image is on it pull with them."""
    row = _client(ctx).registry_add(tenant, name, host, username, _password(password_stdin))
    typer.echo(f"added registry credential {row['name']} for {row['host']} to {tenant}")


@registries_app.command("rotate")
def registries_rotate(
    ctx: typer.Context,
    tenant: TenantArg,
    name: NameArg,
    username: UsernameOpt,
    password_stdin: PasswordStdinOpt = False,
) -> None:
    """Replace a registry credential's username and password (owners); later launches use the new ones."""
    row = _client(ctx).registry_rotate(tenant, name, username, _password(password_stdin))
    typer.echo(f"rotated registry credential {row['name']} of {tenant}")


@registries_app.command("delete")
def registries_delete(ctx: typer.Context, tenant: TenantArg, name: NameArg) -> None:
    """Delete a registry credential (owners); later jobs on its host pull without credentials."""
    _client(ctx).registry_delete(tenant, name)
    typer.echo(f"deleted registry credential {name} of {tenant}")


@registries_app.command("events")
def registries_events(ctx: typer.Context, tenant: TenantArg, as_json: JsonOpt = False) -> None:
    """Who created, rotated or deleted the tenant's registry credentials, newest first."""
    rows = _client(ctx).registry_events(tenant)
    if as_json:
        emit_json(rows)
        return
    grid = table("WHEN", "ACTION", "NAME", "HOST", "BY")
    for row in rows:
        grid.add_row(when(row["at"]), row["action"], row["name"], row["host"], row.get("actor") or "-")
    console().print(grid)
