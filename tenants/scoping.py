"""The one scoping helper: every page, API view and WebSocket consumer asks here what a user may see or do.

Roles become django-guardian object permissions on the Tenant (see `tenants.services`); this module is the
only place that reads them, so views never call guardian directly.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Model, QuerySet
from guardian.shortcuts import get_objects_for_user

from tenants.models import Role, Tenant

M = TypeVar("M", bound=Model)
AnyUser = User | AnonymousUser


class Perm(StrEnum):
    """What a user wants to do in a tenant, weakest first."""

    VIEW = "tenants.view_tenant_jobs"
    SUBMIT = "tenants.submit_jobs"
    MANAGE_JOBS = "tenants.manage_jobs"
    MANAGE_TENANT = "tenants.manage_tenant"


ROLE_PERMS: dict[str, tuple[Perm, ...]] = {
    Role.VIEWER: (Perm.VIEW,),
    Role.MEMBER: (Perm.VIEW, Perm.SUBMIT),
    Role.OWNER: (Perm.VIEW, Perm.SUBMIT, Perm.MANAGE_JOBS, Perm.MANAGE_TENANT),
}


def tenants_for(user: AnyUser, perm: Perm = Perm.VIEW) -> QuerySet[Tenant]:
    """Tenants where `user` holds `perm`: all of them for a superuser, none for an anonymous user."""
    if not user.is_authenticated or not user.is_active:
        return Tenant.objects.none()
    if getattr(user, "is_superuser", False):
        return Tenant.objects.all()
    return get_objects_for_user(
        user, perm.value, klass=Tenant, accept_global_perms=False, with_superuser=False
    )


def restrict(
    queryset: QuerySet[M], user: AnyUser, perm: Perm = Perm.VIEW, tenant_field: str = "tenant"
) -> QuerySet[M]:
    """Narrow a queryset of tenant-owned rows to those in tenants where `user` holds `perm`."""
    return queryset.filter(**{f"{tenant_field}__in": tenants_for(user, perm)})


def has_perm(user: AnyUser, tenant: Tenant, perm: Perm) -> bool:
    """Whether `user` holds `perm` in `tenant`."""
    return tenants_for(user, perm).filter(pk=tenant.pk).exists()


def can_manage_owned(user: AnyUser, obj: Any) -> bool:
    """Whether `user` may cancel or retry `obj` (a row with `tenant` and `owner`): owners of the tenant may
    act on anything in it, members only on what they own, viewers on nothing."""
    tenant = obj.tenant
    if has_perm(user, tenant, Perm.MANAGE_JOBS):
        return True
    return obj.owner_id == getattr(user, "pk", None) and has_perm(user, tenant, Perm.SUBMIT)
