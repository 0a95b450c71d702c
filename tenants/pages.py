"""The page shell every app's pages render in: the tenant the pages show (kept in the session, chosen in
the header's switcher, the user's first tenant by default), the 403 page, and the usage meters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from tenants.models import Tenant
from tenants.scoping import tenants_for
from tenants.usage import tenant_usage

SESSION_TENANT = "tenant"


def current_tenant(request: HttpRequest) -> Tenant | None:
    """The tenant the pages show: the one chosen in the switcher if the user still sees it, else the first."""
    tenants = tenants_for(request.user)
    chosen = request.session.get(SESSION_TENANT)
    if chosen:
        tenant = tenants.filter(slug=chosen).first()
        if tenant is not None:
            return tenant
    return tenants.first()


def render_page(
    request: HttpRequest, template: str, context: dict[str, Any] | None = None, *, status: int = 200
) -> HttpResponse:
    """Render a page inside the shell: the header needs the user's tenants and the current one."""
    shell = {"my_tenants": list(tenants_for(request.user)), "tenant": current_tenant(request)}
    return render(request, template, shell | (context or {}), status=status)


def forbidden(request: HttpRequest, message: str) -> HttpResponse:
    """The 403 page, for an action the user may see but not do."""
    return render_page(request, "portal/403.html", {"message": message}, status=403)


def page_user(request: HttpRequest) -> User:
    assert isinstance(request.user, User)
    return request.user


@require_POST
@login_required
def tenant_switch(request: HttpRequest) -> HttpResponse:
    """Choose the tenant the pages show (only one the user may see), then go back where they were."""
    slug = request.POST.get("tenant", "")
    if not tenants_for(request.user).filter(slug=slug).exists():
        raise Http404("no such tenant")
    request.session[SESSION_TENANT] = slug
    back = request.POST.get("next", "/")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = "/"
    return HttpResponseRedirect(back)


@dataclass(frozen=True)
class Meter:
    """One usage bar: how much of a quota is in use."""

    label: str
    used: int
    limit: int
    unit: str = ""

    @property
    def percent(self) -> int:
        if self.limit <= 0:
            return 100 if self.used else 0
        return min(100, round(100 * self.used / self.limit))


def usage_meters(tenant: Tenant) -> list[Meter]:
    """The tenant's usage against each quota, as bars."""
    usage, quota = tenant_usage(tenant), tenant.quota
    return [
        Meter("GPUs", usage.gpus, quota.gpus),
        Meter("CPU", usage.cpu_millis // 1000, quota.cpu_millis // 1000, "cores"),
        Meter("Memory", usage.memory_mib // 1024, quota.memory_mib // 1024, "GiB"),
        Meter("Running jobs", usage.running_jobs, quota.max_running_jobs),
        Meter("Queued jobs", usage.queued_jobs, quota.max_queued_jobs),
        Meter("Claim storage", usage.storage_gib, quota.storage_gib, "GiB"),
        Meter("Claims", usage.claims, quota.max_claims),
    ]
