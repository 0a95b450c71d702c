"""Memberships from the identity provider's groups (`OIDC_GROUP_MAP`, docs/sso.md), applied at every
single sign-on.

The map names tenants; those tenants are *managed* by the provider for anyone who signs in through it: after
the sign-in, that user's membership in each managed tenant is exactly what their groups give (the strongest
role where several groups name one tenant), or none. So a membership an owner gave by hand in a managed
tenant is replaced at the user's next sign-in; tenants the map does not name are never touched. Every change
is audited as a `MembershipEvent` with no acting user, like an operator's change at the shell.

A tenant keeps an owner: a sign-in that would take the owner role from the tenant's last owner (removed from
the group, or moved to a weaker one) leaves that membership as it is, logs a warning and reports it; the
change happens at a later sign-in once another owner exists. A managed tenant that does not exist yet is
skipped with a warning (an operator creates it: `manage.py tenant create`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.contrib.auth.models import User

from common.ssoconfig import Grant, grants_for
from common.transactions import durable_service
from tenants.members import MemberRefused, membership_event_record, owner_kept_check
from tenants.models import Membership, MembershipEvent, Role, Tenant
from tenants.services import membership_remove, membership_set

log = logging.getLogger(__name__)


@durable_service
def group_memberships_apply(*, user: User, groups: list[str], group_map: Mapping[str, Grant]) -> list[str]:
    """Make `user`'s memberships in the tenants `group_map` names what their `groups` give. Returns what
    changed or was held back, one line each (for the log and the tests)."""
    wanted = grants_for(groups, dict(group_map))
    changes: list[str] = []
    for slug in sorted({grant.tenant for grant in group_map.values()}):
        tenant = Tenant.objects.select_for_update().filter(slug=slug).first()
        if tenant is None:
            log.warning("OIDC_GROUP_MAP names tenant %s, which does not exist; skipped", slug)
            continue
        membership = Membership.objects.filter(tenant=tenant, user=user).first()
        role = wanted.get(slug)
        previous = membership.role if membership else ""
        if previous == (role or ""):
            continue
        if previous == Role.OWNER:
            try:
                owner_kept_check(tenant=tenant, leaving={user.username}, field="role")
            except MemberRefused:
                line = f"{user.username} stays owner of {slug}: the last owner (groups give {role or 'none'})"
                log.warning("single sign-on: %s", line)
                changes.append(line)
                continue
        if role is None:
            membership_remove.nested(tenant=tenant, user=user)
            action = MembershipEvent.Action.REMOVED
        else:
            membership_set.nested(tenant=tenant, user=user, role=role)
            action = MembershipEvent.Action.ROLE_CHANGED if previous else MembershipEvent.Action.ADDED
        membership_event_record(
            tenant=tenant,
            actor=None,
            username=user.username,
            action=action,
            role=role or "",
            previous=previous,
        )
        changes.append(f"{user.username} {action} in {slug}" + (f" as {role}" if role else ""))
    return changes
