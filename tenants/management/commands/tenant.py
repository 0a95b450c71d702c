"""Tenants from the shell, for the first team of an installation and for operators:
`tenant create SLUG --owner USER [--name NAME]` makes a tenant (default quota and policy) with its first
owner; `tenant member add SLUG USER [--role owner|member|viewer]` adds an existing user. Both are audited as
membership changes with no acting user; bad input exits non-zero with a message naming the argument."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.members import MemberRefused, member_add_by_operator, team_create
from tenants.models import Role, Tenant

ARGUMENTS = {"slug": "SLUG", "owner": "--owner", "username": "USER", "role": "--role"}


def _refusal(exc: MemberRefused) -> CommandError:
    return CommandError(
        "; ".join(f"{ARGUMENTS.get(field, field)}: {m}" for field, msgs in exc.errors.items() for m in msgs)
    )


class Command(BaseCommand):
    help = "Create a tenant with its first owner, or add an existing user to a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{create,member}")
        create = actions.add_parser(
            "create", help="Create a tenant (default quota and policy) and its owner."
        )
        create.add_argument("slug", metavar="SLUG", help="Short name, used in URLs and namespaces.")
        create.add_argument("--owner", required=True, help="An existing user, the tenant's first owner.")
        create.add_argument("--name", default="", help="Display name (default: the slug).")
        member = actions.add_parser("member", help="Manage a tenant's members.")
        member_actions = member.add_subparsers(dest="member_action", required=True, metavar="{add}")
        add = member_actions.add_parser("add", help="Add an existing user to a tenant with a role.")
        add.add_argument("slug", metavar="SLUG", help="The tenant.")
        add.add_argument("username", metavar="USER", help="An existing user.")
        add.add_argument("--role", choices=Role.values, default=Role.MEMBER, help="Default: member.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "create":
            self._create(options["slug"], options["owner"], options["name"].strip())
        else:
            self._add(options["slug"], options["username"], options["role"])

    def _create(self, slug: str, owner: str, name: str) -> None:
        if len(name) > 100:
            raise CommandError("--name: at most 100 characters")
        try:
            tenant = team_create(slug=slug, name=name, owner=owner)
        except MemberRefused as exc:
            raise _refusal(exc) from None
        self.stdout.write(f"created tenant {tenant.slug} ({tenant.name}) with owner {owner}")

    def _add(self, slug: str, username: str, role: str) -> None:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(f"SLUG: no tenant {slug}")
        try:
            member_add_by_operator(tenant=tenant, username=username, role=role)
        except MemberRefused as exc:
            raise _refusal(exc) from None
        self.stdout.write(f"added {username} to {slug} as {role}")
