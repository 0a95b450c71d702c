"""The tenant page's registry credentials: what the page shows (names, hosts, usernames, history; never a
password) and the owners' create, rotate and delete forms. A refused form comes back as its own page with the
field errors (400; the password typed is never sent back), a done one redirects to the tenant page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from tenants.models import RegistryCredential, Tenant
from tenants.pages import forbidden, page_user, render_page
from tenants.registries import (
    RegistryRefused,
    registry_credential_create,
    registry_credential_delete,
    registry_credential_events,
    registry_credential_list,
    registry_credential_rotate,
)
from tenants.scoping import Perm, has_perm, tenants_for


def registries_context(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    """What the tenant page shows of the tenant's registry credentials (any member) and whether the user may
    change them (owners)."""
    return {
        "registry_credentials": registry_credential_list(tenant=tenant),
        "registry_credential_events": registry_credential_events(tenant=tenant)[:10],
        "can_manage_registries": has_perm(request.user, tenant, Perm.MANAGE_TENANT),
    }


def _tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = tenants_for(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def _credential(tenant: Tenant, name: str) -> RegistryCredential:
    credential = registry_credential_list(tenant=tenant).filter(name=name).first()
    if credential is None:
        raise Http404("no such registry credential")
    return credential


def _login(request: HttpRequest) -> dict[str, str]:
    return {key: request.POST.get(key, "") for key in ("username", "password")}


def _back(tenant: Tenant) -> HttpResponse:
    return redirect(reverse("tenant", args=[tenant.slug]) + "#registries")


def _refused(
    request: HttpRequest, tenant: Tenant, exc: RegistryRefused, *, action: str, name: str
) -> HttpResponse:
    if exc.status == 403:
        return forbidden(request, str(exc))
    context = {"shown": tenant, "errors": sorted(exc.errors.items()), "action": action, "name": name}
    return render_page(request, "portal/tenant_registry_form.html", context, status=exc.status)


@require_POST
@login_required
def registry_create_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Add registry credentials (owners; the service checks again)."""
    tenant = _tenant(request, slug)
    name = request.POST.get("name", "")
    try:
        registry_credential_create(
            tenant=tenant,
            user=page_user(request),
            name=name,
            host=request.POST.get("host", ""),
            values=_login(request),
        )
    except RegistryRefused as exc:
        return _refused(request, tenant, exc, action="create", name=name)
    messages.success(request, f"Registry credentials {name} added.")
    return _back(tenant)


@require_POST
@login_required
def registry_rotate_view(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """Replace a registry credential's username and password (owners); later launches use them."""
    tenant = _tenant(request, slug)
    credential = _credential(tenant, name)
    try:
        registry_credential_rotate(credential=credential, user=page_user(request), values=_login(request))
    except RegistryRefused as exc:
        return _refused(request, tenant, exc, action="rotate", name=name)
    messages.success(request, f"Registry credentials {name} rotated; later launches use them.")
    return _back(tenant)


@require_POST
@login_required
def registry_delete_view(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """Delete registry credentials (owners)."""
    tenant = _tenant(request, slug)
    credential = _credential(tenant, name)
    try:
        registry_credential_delete(credential=credential, user=page_user(request))
    except RegistryRefused as exc:
        return _refused(request, tenant, exc, action="delete", name=name)
    messages.success(request, f"Registry credentials {name} deleted.")
    return _back(tenant)
