"""Writes to tenants: memberships and the guardian permissions derived from them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from guardian.shortcuts import assign_perm, get_users_with_perms, remove_perm

from common.transactions import durable_service
from tenants.models import Membership, Quota, Role, Tenant
from tenants.scoping import ROLE_PERMS, Perm


@durable_service
def tenant_create(
    *, slug: str, name: str, weight: float = 1.0, quota: dict[str, int] | None = None
) -> Tenant:
    """Create a tenant with its quota row (defaults unless given)."""
    tenant = Tenant.objects.create(slug=slug, name=name, weight=weight)
    Quota.objects.create(tenant=tenant, **(quota or {}))
    return tenant


QUOTA_FIELDS = (
    "gpus",
    "cpu_millis",
    "memory_mib",
    "gpus_borrowing_limit",
    "cpu_millis_borrowing_limit",
    "memory_mib_borrowing_limit",
    "cohort",
    "max_running_jobs",
    "max_queued_jobs",
    "storage_gib",
    "max_claims",
)


@durable_service
def quota_set(*, tenant: Tenant, weight: float | None = None, **fields: Any) -> Quota:
    """Change some of the tenant's quota fields (nominal amounts, borrowing limits, cohort, job limits,
    claim storage and count) and
    its fair-share weight, all or none; raises django's ValidationError with the refused fields."""
    unknown = sorted(set(fields) - set(QUOTA_FIELDS))
    if unknown:
        raise ValidationError({name: ["unknown quota field"] for name in unknown})
    if weight is not None:
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        locked.weight = weight
        locked.full_clean(validate_unique=False)
        locked.save(update_fields=["weight"])
        tenant.weight = weight
    quota = Quota.objects.select_for_update().get(tenant=tenant)
    for name, value in fields.items():
        setattr(quota, name, value)
    quota.full_clean(exclude=["tenant"])
    quota.save()
    return quota


@durable_service
def membership_set(*, tenant: Tenant, user: User, role: str) -> Membership:
    """Give `user` the `role` in `tenant` (creating or changing the membership) and sync permissions."""
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}; use one of {', '.join(Role.values)}")
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    tenant_sync_permissions(tenant=tenant)
    return membership


@durable_service
def membership_remove(*, tenant: Tenant, user: User) -> None:
    """Take `user` out of `tenant`, with every permission the membership gave."""
    Membership.objects.filter(tenant=tenant, user=user).delete()
    tenant_sync_permissions(tenant=tenant)


def tenant_sync_permissions(*, tenant: Tenant) -> None:
    """Make guardian's object permissions on `tenant` exactly what its memberships' roles say.

    Idempotent; called after any membership change (services and the admin console alike).
    """
    wanted: dict[int, set[str]] = {}
    members = {}
    for membership in Membership.objects.filter(tenant=tenant).select_related("user"):
        members[membership.user_id] = membership.user
        wanted[membership.user_id] = {perm.value for perm in ROLE_PERMS[membership.role]}
    current: dict[User, list[str]] = get_users_with_perms(  # type: ignore[assignment]
        tenant, attach_perms=True, with_superusers=False, with_group_users=False
    )
    for user, perm_names in current.items():
        held = {f"tenants.{name}" for name in perm_names}
        for perm in held - wanted.get(user.pk, set()):
            if perm in {p.value for p in Perm}:
                remove_perm(perm, user, tenant)
    for user_id, perms in wanted.items():
        held = {f"tenants.{name}" for user, names in current.items() if user.pk == user_id for name in names}
        for perm in perms - held:
            assign_perm(perm, members[user_id], tenant)
