"""A tenant's owners run their team: add an existing user with a role, change a member's role, remove a
member. Owners and platform admins only (a member who may see the tenant is refused with 403; the callers
give 404 for a tenant the user cannot see). A tenant always keeps an owner: the last one can be neither
removed nor demoted. Every change is audited in `MembershipEvent`.

The writes go through `tenants.services.membership_set` / `membership_remove`, so guardian's permissions
follow the rows exactly as they do for the admin console.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models import QuerySet

from common.errors import Refused
from common.transactions import durable_service
from tenants.models import Membership, MembershipEvent, Role, Tenant
from tenants.scoping import AnyUser, Perm, has_perm
from tenants.services import membership_remove, membership_set, tenant_create


class MemberRefused(Refused):
    """A membership change was refused; `errors` maps fields (username, role) to messages."""


def require_owner(actor: AnyUser, tenant: Tenant) -> None:
    """Refuse (403) unless `actor` may manage the tenant's members: its owners and platform admins."""
    if not has_perm(actor, tenant, Perm.MANAGE_TENANT):
        raise MemberRefused({"": [f"only owners of tenant {tenant.slug} manage its members"]}, status=403)


def _role(role: Any) -> str:
    if role not in Role.values:
        raise MemberRefused({"role": [f"choose one of {', '.join(Role.values)}"]})
    return str(role)


def _lock(tenant: Tenant) -> None:
    """Serialise membership changes of one tenant, so two owners demoting each other cannot both succeed."""
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()


def owner_kept_check(
    *, tenant: Tenant, leaving: Collection[str], joining: Collection[str] = (), field: str = "username"
) -> None:
    """Refuse (400, on `field`) a change that would leave `tenant` without an owner: the one rule of the API,
    the tenant page and the admin console. `leaving` are the usernames of members the change removes or takes
    the owner role from, `joining` those it makes owners. A tenant that has no owner yet (one an operator is
    still setting up) refuses nothing. Locks the tenant's membership changes until the caller's transaction
    ends, so two changes cannot each leave one owner and together none."""
    _lock(tenant)
    owners = set(
        Membership.objects.filter(tenant=tenant, role=Role.OWNER).values_list("user__username", flat=True)
    )
    if not owners or (owners - set(leaving)) or joining:
        return
    names = sorted(owners)
    if len(names) == 1:
        message = f"{names[0]} is the last owner of {tenant.slug}; make another owner first"
    else:
        message = f"{' and '.join(names)} are the last owners of {tenant.slug}; keep one or make another owner first"
    raise MemberRefused({field: [message]})


def _membership(tenant: Tenant, username: str) -> Membership:
    membership = (
        Membership.objects.filter(tenant=tenant, user__username=username).select_related("user").first()
    )
    if membership is None:
        raise MemberRefused({"username": [f"{username} is not a member of {tenant.slug}"]}, status=404)
    return membership


def membership_event_record(
    *, tenant: Tenant, actor: User | None, username: str, action: str, role: str = "", previous: str = ""
) -> None:
    """Record one membership change in the tenant's audit."""
    MembershipEvent.objects.create(
        tenant=tenant, username=username, action=action, role=role, previous_role=previous, actor=actor
    )


def membership_add_audited(*, tenant: Tenant, actor: User | None, username: Any, role: Any) -> Membership:
    """Add the existing user `username` with `role`, audited, without checking who asks: callers check
    (`member_add`) or are trusted (the shell, an accepted invitation). Runs in the caller's transaction."""
    errors: dict[str, list[str]] = {}
    user: User | None = None
    if username is not None and not isinstance(username, str):
        errors["username"] = [f"must be a username (text), got {type(username).__name__}"]
    elif not username or not username.strip():
        errors["username"] = ["this field is required"]
    else:
        username = username.strip()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            errors["username"] = [f"no user named {username}; they must sign in or be created first"]
        elif not user.is_active:
            errors["username"] = [f"user {username} is inactive"]
    if role not in Role.values:
        errors["role"] = [f"choose one of {', '.join(Role.values)}"]
    if errors:
        raise MemberRefused(errors)
    assert user is not None
    _lock(tenant)
    if Membership.objects.filter(tenant=tenant, user=user).exists():
        raise MemberRefused({"username": [f"{username} is already a member of {tenant.slug}"]})
    membership = membership_set.nested(tenant=tenant, user=user, role=role)
    membership_event_record(
        tenant=tenant, actor=actor, username=user.username, action=MembershipEvent.Action.ADDED, role=role
    )
    return membership


@durable_service
def member_add(*, tenant: Tenant, actor: User, username: Any, role: Any = Role.MEMBER) -> Membership:
    """Add the existing user `username` to `tenant` with `role` (owners and platform admins). Refused with
    field errors: an unknown or inactive user, a bad role, someone already a member."""
    require_owner(actor, tenant)
    return membership_add_audited(tenant=tenant, actor=actor, username=username, role=role)


@durable_service
def member_add_by_operator(*, tenant: Tenant, username: Any, role: Any = Role.MEMBER) -> Membership:
    """`member_add` for an operator at the shell (`manage.py tenant member add`): no acting user to check,
    audited with none."""
    return membership_add_audited(tenant=tenant, actor=None, username=username, role=role)


SLUG_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?")


@durable_service
def team_create(*, slug: str, name: str, owner: str) -> Tenant:
    """A new tenant (default quota and policy) with the existing user `owner` as its first owner, for an
    operator at the shell (`manage.py tenant create`). The slug names the tenant's namespace, so it is
    lower-case letters, digits and '-', at most 40 characters."""
    errors: dict[str, list[str]] = {}
    if not SLUG_RE.fullmatch(slug):
        errors["slug"] = [
            "use 1 to 40 lower-case letters, digits and '-', starting and ending with a letter or digit"
        ]
    elif Tenant.objects.filter(slug=slug).exists():
        errors["slug"] = [f"a tenant {slug} already exists"]
    if not get_user_model().objects.filter(username=owner, is_active=True).exists():
        errors["owner"] = [
            f"no active user named {owner}; create the user first (manage.py createsuperuser or the admin)"
        ]
    if errors:
        raise MemberRefused(errors)
    tenant = tenant_create.nested(slug=slug, name=name or slug)
    membership_add_audited(tenant=tenant, actor=None, username=owner, role=Role.OWNER)
    return tenant


@durable_service
def member_role_set(*, tenant: Tenant, actor: User, username: str, role: Any) -> Membership:
    """Give member `username` the `role` (owners and platform admins); the last owner keeps theirs."""
    require_owner(actor, tenant)
    role = _role(role)
    _lock(tenant)
    membership = _membership(tenant, username)
    previous = membership.role
    if previous == role:
        return membership
    if previous == Role.OWNER:
        owner_kept_check(tenant=tenant, leaving={username}, field="role")
    membership = membership_set.nested(tenant=tenant, user=membership.user, role=role)
    membership_event_record(
        tenant=tenant,
        actor=actor,
        username=username,
        action=MembershipEvent.Action.ROLE_CHANGED,
        role=role,
        previous=previous,
    )
    return membership


@durable_service
def member_remove(*, tenant: Tenant, actor: User, username: str) -> None:
    """Take member `username` out of `tenant` (owners and platform admins); never the last owner."""
    require_owner(actor, tenant)
    _lock(tenant)
    membership = _membership(tenant, username)
    if membership.role == Role.OWNER:
        owner_kept_check(tenant=tenant, leaving={username})
    membership_remove.nested(tenant=tenant, user=membership.user)
    membership_event_record(
        tenant=tenant,
        actor=actor,
        username=username,
        action=MembershipEvent.Action.REMOVED,
        previous=membership.role,
    )


def member_events(*, tenant: Tenant) -> QuerySet[MembershipEvent]:
    """The tenant's membership audit, newest first."""
    return MembershipEvent.objects.filter(tenant=tenant).select_related("actor")
