"""Reads of subscriptions and their delivery logs, always through the tenant scoping helper: a user sees
their own subscriptions in tenants they still belong to, and the tenant subscriptions of tenants they own;
anything else is the same DoesNotExist as a subscription that never existed."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet

from jobs.notifications.models import Notification, Subscription
from tenants.models import Tenant
from tenants.scoping import Perm, has_perm, restrict, tenants_for

AnyUser = User | AnonymousUser


def subscription_list(*, user: AnyUser, tenant: Tenant | None = None) -> QuerySet[Subscription]:
    """The subscriptions `user` manages, newest first per tenant, optionally of one tenant."""
    mine = Q(user_id=user.pk) if user.is_authenticated else Q(pk__in=[])
    owned = Q(user__isnull=True, tenant__in=tenants_for(user, Perm.MANAGE_TENANT))
    rows = restrict(Subscription.objects.select_related("tenant", "user"), user, Perm.VIEW).filter(
        mine | owned
    )
    return rows.filter(tenant=tenant) if tenant is not None else rows


def subscription_get(*, user: AnyUser, subscription_id: int | str) -> Subscription:
    """One subscription `user` manages; Subscription.DoesNotExist for anyone else's, as for none."""
    try:
        pk = int(subscription_id)
    except (TypeError, ValueError):
        raise Subscription.DoesNotExist(subscription_id) from None
    return subscription_list(user=user).get(pk=pk)


def subscription_deliveries(*, subscription: Subscription, limit: int = 50) -> list[Notification]:
    """The subscription's newest notifications, each with its attempts (the delivery log)."""
    rows = subscription.notifications.select_related("job").prefetch_related("attempt_log")
    return list(rows.order_by("-created_at", "-id")[:limit])


def tenant_subscriptions(*, user: AnyUser, tenant: Tenant) -> QuerySet[Subscription] | None:
    """The tenant's own subscriptions (every job) for the tenant page, or None when `user` does not own it."""
    if not has_perm(user, tenant, Perm.MANAGE_TENANT):
        return None
    return subscription_list(user=user, tenant=tenant).filter(user__isnull=True)
