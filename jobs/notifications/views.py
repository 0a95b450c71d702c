"""The notifications pages: your subscriptions (and, for owners, your tenants') with a form to create one,
and a subscription's page (its settings, enable/disable, send a test, delete, and the delivery log), and the
e-mail verification link with its resend button. Thin views over the selectors and services; anyone else's
subscription answers 404."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from common.errors import Refused
from common.sealing import seal, unseal
from jobs.notifications.forms import SubscriptionForm
from jobs.notifications.models import Subscription
from jobs.notifications.selectors import subscription_deliveries, subscription_get, subscription_list
from jobs.notifications.services import (
    subscription_create,
    subscription_delete,
    subscription_test,
    subscription_update,
)
from jobs.notifications.verification import subscription_verify, verification_queue
from tenants.pages import current_tenant, forbidden, page_user, render_page
from tenants.scoping import Perm, tenants_for

DELIVERIES_SHOWN = 50
# The session key under which a new webhook's signing secret waits, sealed, for the page the create redirects
# to: shown there once, then gone (a reload shows no secret and creates nothing).
NEW_SECRET = "notifications:new-secret"  # noqa: S105 (a session key, not a secret)


def _subscription(request: HttpRequest, subscription_id: int) -> Subscription:
    try:
        return subscription_get(user=request.user, subscription_id=subscription_id)
    except Subscription.DoesNotExist:
        raise Http404("no such subscription") from None


@require_http_methods(["GET", "POST"])
@login_required
def notifications_page(request: HttpRequest) -> HttpResponse:
    """GET: the list and the form (`?tenant=&scope=tenant` preselects a tenant subscription). POST: create
    one and redirect to its page (post/redirect/get: a reload there creates nothing), which shows the signing
    secret this once."""
    tenants = list(tenants_for(request.user))
    if request.method == "POST":
        form = SubscriptionForm(request.POST, tenants=tenants)
        if form.is_valid():
            data = dict(form.cleaned_data)
            tenant = next(t for t in tenants if t.slug == data.pop("tenant"))
            try:
                created = subscription_create(user=page_user(request), tenant=tenant, **data)
            except Refused as exc:
                if exc.status == 403:
                    return forbidden(request, "; ".join(m for ms in exc.errors.values() for m in ms))
                for field, problems in exc.errors.items():
                    for problem in problems:
                        form.add_error(field if field in form.fields else None, problem)
            else:
                if created.secret:
                    request.session[NEW_SECRET] = seal(
                        {"id": created.subscription.pk, "secret": created.secret}
                    )
                return redirect("notification-detail", created.subscription.pk)
    else:
        chosen = request.GET.get("tenant") or getattr(current_tenant(request), "slug", None)
        form = SubscriptionForm(
            tenants=tenants, initial={"tenant": chosen, "scope": request.GET.get("scope") or "user"}
        )
    owned = {t.slug for t in tenants_for(request.user, Perm.MANAGE_TENANT)}
    context = {
        "form": form,
        "subscriptions": subscription_list(user=request.user),
        "owns_a_tenant": bool(owned),
    }
    return render_page(request, "notifications/list.html", context, status=400 if form.errors else 200)


def _detail(
    request: HttpRequest, subscription: Subscription, *, secret: str | None = None, status: int = 200
) -> HttpResponse:
    deliveries = subscription_deliveries(subscription=subscription, limit=DELIVERIES_SHOWN)
    context = {"sub": subscription, "secret": secret, "deliveries": deliveries}
    response = render_page(request, "notifications/detail.html", context, status=status)
    if secret:
        response["Cache-Control"] = "no-store"  # the secret stays in no cache
    return response


@login_required
def notification_detail(request: HttpRequest, subscription_id: int) -> HttpResponse:
    """A subscription's settings, actions and delivery log; right after the create, its signing secret once."""
    subscription = _subscription(request, subscription_id)
    sealed = request.session.pop(NEW_SECRET, None)
    new = unseal(sealed) if sealed else {}
    secret = new["secret"] if new.get("id") == subscription.pk else None
    return _detail(request, subscription, secret=secret)


@require_POST
@login_required
def notification_toggle(request: HttpRequest, subscription_id: int) -> HttpResponse:
    sub = _subscription(request, subscription_id)
    sub = subscription_update(subscription=sub, enabled=not sub.enabled)
    messages.success(request, f"{sub.name} is {'enabled' if sub.enabled else 'disabled'}.")
    return redirect("notification-detail", sub.pk)


@require_POST
@login_required
def notification_test(request: HttpRequest, subscription_id: int) -> HttpResponse:
    sub = _subscription(request, subscription_id)
    try:
        subscription_test(subscription=sub, user=page_user(request))
    except Refused as exc:
        messages.error(request, "Not sent: " + _problems(exc))
    else:
        messages.success(request, f"A test notification is on its way to {sub.target}; see the delivery log.")
    return redirect("notification-detail", sub.pk)


@require_POST
@login_required
def notification_delete(request: HttpRequest, subscription_id: int) -> HttpResponse:
    sub = _subscription(request, subscription_id)
    subscription_delete(subscription=sub)
    messages.success(request, f"Deleted {sub.name}.")
    return redirect("notifications")


def _problems(exc: Refused) -> str:
    return "; ".join(m for ms in exc.errors.values() for m in ms)


@login_required
def notification_verify(request: HttpRequest, subscription_id: int, token: str) -> HttpResponse:
    """The link of the verification e-mail: verifies the address for someone who manages the subscription
    (anyone else gets 404); an expired or wrong link says so and offers a new one."""
    sub = _subscription(request, subscription_id)
    try:
        sub = subscription_verify(subscription=sub, token=token)
    except Refused as exc:
        messages.error(request, _problems(exc))
        return _detail(request, sub, status=400)
    messages.success(request, f"{sub.email} is verified: notifications of {sub.name} go there now.")
    return redirect("notification-detail", sub.pk)


@require_POST
@login_required
def notification_verify_resend(request: HttpRequest, subscription_id: int) -> HttpResponse:
    """Send the e-mail address a new verification link."""
    sub = _subscription(request, subscription_id)
    try:
        verification_queue(subscription=sub)
    except Refused as exc:
        messages.error(request, _problems(exc))
    else:
        messages.success(request, f"A new verification link is on its way to {sub.email}.")
    return redirect("notification-detail", sub.pk)
