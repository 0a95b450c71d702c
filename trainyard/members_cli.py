"""`trainyard members`: list a tenant's members, and (owners) add an existing user, change a role, remove
a member (a client of `/api/v1/tenants/<slug>/members/` only)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from trainyard.output import console, emit_json, table

members_app = typer.Typer(
    help="Your tenants' members; owners add, re-role and remove them.", no_args_is_help=True
)
TenantArg = Annotated[str, typer.Argument(metavar="TENANT", help="The tenant's slug.", show_default=False)]
UserArg = Annotated[str, typer.Argument(metavar="USER", help="A username.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="The server's answer as JSON.")]


class Role(StrEnum):
    """A member's role in a tenant."""

    owner = "owner"
    member = "member"
    viewer = "viewer"


def _client(ctx: typer.Context) -> Any:
    from trainyard.cli import client

    return client(ctx)


@members_app.command("list")
def members_list(ctx: typer.Context, tenant: TenantArg, as_json: JsonOpt = False) -> None:
    """List a tenant's members and roles (owners see e-mail addresses)."""
    rows = _client(ctx).members(tenant)
    if as_json:
        emit_json(rows)
        return
    grid = table("USER", "ROLE", "E-MAIL")
    for row in rows:
        grid.add_row(row["username"], row["role"], row.get("email") or "-")
    console().print(grid)


@members_app.command("add")
def members_add(
    ctx: typer.Context,
    tenant: TenantArg,
    username: UserArg,
    role: Annotated[Role, typer.Option(help="The role to give.")] = Role.member,
) -> None:
    """Add an existing user to a tenant (owners)."""
    row = _client(ctx).member_add(tenant, username, role.value)
    typer.echo(f"added {row['username']} to {tenant} as {row['role']}")


@members_app.command("role")
def members_role(
    ctx: typer.Context,
    tenant: TenantArg,
    username: UserArg,
    role: Annotated[
        Role, typer.Argument(metavar="ROLE", help="owner, member or viewer.", show_default=False)
    ],
) -> None:
    """Change a member's role (owners; the last owner keeps theirs)."""
    row = _client(ctx).member_role(tenant, username, role.value)
    typer.echo(f"{row['username']} is now {row['role']} of {tenant}")


@members_app.command("remove")
def members_remove(ctx: typer.Context, tenant: TenantArg, username: UserArg) -> None:
    """Remove a member from a tenant (owners; never the last owner)."""
    _client(ctx).member_remove(tenant, username)
    typer.echo(f"removed {username} from {tenant}")
