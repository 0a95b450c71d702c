"""The pages that span the apps: the dashboard (my running and queued jobs, the current tenant's usage, the
cluster's free room) and a tenant's page (members, quota and usage, GPU-hours per day, its queue). The job
pages live in jobs/views.py; the page shell and the tenant switcher in tenants/pages.py."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from jobs import cluster
from jobs.core.states import ACTIVE, WAITING, JobStatus
from jobs.notifications.selectors import tenant_subscriptions
from jobs.selectors import job_list, tenant_gpu_hours_by_day, tenant_namespace_not_owned
from jobs.views import cluster_nodes
from tenants.member_pages import members_context
from tenants.models import Tenant
from tenants.pages import current_tenant, page_user, render_page, usage_meters
from tenants.registry_pages import registries_context
from tenants.scoping import tenants_for
from tenants.secret_pages import secrets_context

GPU_HOURS_DAYS = 14
GPU_HOURS_SCALE_FLOOR = 1.0


def gpu_hours_text(hours: float) -> str:
    """A GPU-hours figure for the bars: one decimal from 1 up, two significant digits below (0.002, not
    0.0), nothing for none."""
    if hours <= 0:
        return ""
    return f"{hours:.1f}" if hours >= 1 else f"{hours:.2g}"


@require_GET
@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """My running, queued and halted jobs, the current tenant's usage against its quota, the cluster's free room."""
    tenant = current_tenant(request)
    mine = job_list(user=request.user, tenant=tenant, owner=page_user(request)).filter(
        status__in=ACTIVE | WAITING | {JobStatus.HALTED}
    )
    nodes, cluster_error = cluster_nodes()
    return render_page(
        request,
        "portal/dashboard.html",
        {
            "jobs": mine[:50] if tenant else [],
            "meters": usage_meters(tenant) if tenant else [],
            "nodes": nodes,
            "cluster_error": cluster_error,
        },
    )


# --- tenants --------------------------------------------------------------------------------------------


@require_GET
@login_required
def tenant_page(request: HttpRequest, slug: str) -> HttpResponse:
    """A tenant: members and roles (owners manage them), quota, usage and policy, GPU-hours per day, and its
    queue in order."""
    tenant = tenants_for(request.user).filter(slug=slug).select_related("quota").first()
    if tenant is None:
        raise Http404("no such tenant")
    gpu_hours = tenant_gpu_hours_by_day(tenant=tenant, days=GPU_HOURS_DAYS)
    # The bars' scale reaches at least GPU_HOURS_SCALE_FLOOR, so a few seconds of GPU time is a sliver, not a
    # full bar.
    peak = max([GPU_HOURS_SCALE_FLOOR, *(h for _, h in gpu_hours)])
    queue = (
        tenant.jobs.waiting()
        .select_related("owner")
        .order_by(F("queue_position").asc(nulls_last=True), "created_at")
    )
    return render_page(
        request,
        "portal/tenant.html",
        {
            "shown": tenant,
            "members": tenant.memberships.select_related("user").order_by("role", "user__username"),
            "meters": usage_meters(tenant),
            "quota": tenant.quota,
            "gpu_hours": [
                (day, gpu_hours_text(hours), round(100 * hours / peak, 1)) for day, hours in gpu_hours
            ],
            "gpu_hours_total": gpu_hours_text(sum(h for _, h in gpu_hours)) or "0",
            "queue": queue,
            "statuses": JobStatus,
            **secrets_context(request, tenant),
            **registries_context(request, tenant),
            **members_context(request, tenant),
            "tenant_subscriptions": tenant_subscriptions(user=request.user, tenant=tenant),
            "namespace_problem": _namespace_problem(request, tenant),
        },
    )


def _namespace_problem(request: HttpRequest, tenant: Tenant) -> dict[str, str] | None:
    """For a platform admin, when the tenant's jobs wait on a namespace this installation does not own: the
    namespace, the prefix setting that named it, and the command that hands it over on purpose."""
    if not getattr(request.user, "is_superuser", False) or not tenant_namespace_not_owned(tenant=tenant):
        return None
    namespace = cluster.namespace_for(tenant)
    return {
        "namespace": namespace,
        "prefix": settings.TENANT_NAMESPACE_PREFIX,
        "command": cluster.ownership_command(namespace, tenant.slug),
    }
