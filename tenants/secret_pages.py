"""The tenant page's data-store secrets: what the page shows (names, keys, history; never a value) and the
owners' create, rotate and delete forms. A refused form comes back as its own page with the field errors
(400; the values typed are never sent back), a done one redirects to the tenant page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from tenants.models import DataStoreSecret, Tenant
from tenants.pages import forbidden, page_user, render_page
from tenants.scoping import Perm, has_perm, tenants_for
from tenants.secrets import (
    SECRET_KEYS,
    SecretRefused,
    datastore_secret_create,
    datastore_secret_delete,
    datastore_secret_events,
    datastore_secret_list,
    datastore_secret_rotate,
)


def secrets_context(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    """What the tenant page shows of the tenant's data-store secrets (any member) and whether the user may
    change them (owners)."""
    return {
        "datastore_secrets": datastore_secret_list(tenant=tenant),
        "datastore_secret_events": datastore_secret_events(tenant=tenant)[:10],
        "can_manage_secrets": has_perm(request.user, tenant, Perm.MANAGE_TENANT),
    }


def _tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = tenants_for(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def _secret(tenant: Tenant, name: str) -> DataStoreSecret:
    secret = datastore_secret_list(tenant=tenant).filter(name=name).first()
    if secret is None:
        raise Http404("no such data-store secret")
    return secret


def _values(request: HttpRequest) -> dict[str, str]:
    return {key: request.POST[key] for key in SECRET_KEYS if key in request.POST}


def _back(tenant: Tenant) -> HttpResponse:
    return redirect(reverse("tenant", args=[tenant.slug]) + "#secrets")


def _refused(
    request: HttpRequest, tenant: Tenant, exc: SecretRefused, *, action: str, name: str
) -> HttpResponse:
    if exc.status == 403:
        return forbidden(request, str(exc))
    if exc.status == 409:
        messages.error(request, str(exc))
        return _back(tenant)
    context = {"shown": tenant, "errors": sorted(exc.errors.items()), "action": action, "name": name}
    return render_page(request, "portal/tenant_secret_form.html", context, status=exc.status)


@require_POST
@login_required
def secret_create_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Create a data-store secret (owners; the service checks again)."""
    tenant = _tenant(request, slug)
    name = request.POST.get("name", "")
    try:
        datastore_secret_create(tenant=tenant, user=page_user(request), name=name, values=_values(request))
    except SecretRefused as exc:
        return _refused(request, tenant, exc, action="create", name=name)
    messages.success(request, f"Data-store secret {name} created.")
    return _back(tenant)


@require_POST
@login_required
def secret_rotate_view(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """Replace a secret's values (owners); later launches use them."""
    tenant = _tenant(request, slug)
    secret = _secret(tenant, name)
    try:
        datastore_secret_rotate(secret=secret, user=page_user(request), values=_values(request))
    except SecretRefused as exc:
        return _refused(request, tenant, exc, action="rotate", name=name)
    messages.success(request, f"Data-store secret {name} rotated; later launches use the new values.")
    return _back(tenant)


@require_POST
@login_required
def secret_delete_view(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """Delete a secret (owners); refused while jobs that may still launch name it."""
    tenant = _tenant(request, slug)
    secret = _secret(tenant, name)
    try:
        datastore_secret_delete(secret=secret, user=page_user(request))
    except SecretRefused as exc:
        return _refused(request, tenant, exc, action="delete", name=name)
    messages.success(request, f"Data-store secret {name} deleted.")
    return _back(tenant)
