"""The tenant page's team section: owners add a member by username with a role, change roles and remove
members (POST forms; a done or refused form redirects back to the page with a message naming what went
wrong), and every member sees the tenant's quota and policy as the platform admins set them."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from tenants.invitations import invitations_pending
from tenants.members import MemberRefused, member_add, member_events, member_remove, member_role_set
from tenants.models import Role, Tenant
from tenants.pages import forbidden, page_user
from tenants.policy import policy_of
from tenants.scoping import Perm, has_perm, tenants_for


def _list(values: Any, empty: str) -> str:
    return ", ".join(values) if values else empty


def _or_default(value: Any, unit: str = "") -> str:
    return "platform default" if value is None else f"{value}{unit}"


def policy_rows(tenant: Tenant) -> list[tuple[str, str]]:
    """The tenant's policy as label and value pairs, for reading (platform admins change it)."""
    p = policy_of(tenant)
    return [
        ("Images from", _list(p.image_registries, "any registry")),
        ("Data-store hosts", _list(p.datastore_hosts, "any public endpoint")),
        ("Host paths", _list(p.host_path_prefixes, "none")),
        ("Highest priority (members / owners)", f"{p.member_max_priority} / {p.owner_max_priority}"),
        ("Pod security", p.pod_security),
        ("Preempt own lower-priority jobs", "yes" if p.preempt_lower_priority else "no"),
        (
            "Halt idle GPU jobs after",
            _or_default(p.idle_gpu_halt_after_seconds, " s").replace("platform default", "never"),
        ),
        ("Checkpoint claims a pvc volume may mount", p.get_job_claims_display()),
        ("Log lines per learner and attempt", _or_default(p.log_max_lines)),
        ("Result files per attempt", _or_default(p.result_max_files)),
    ]


def quota_rows(tenant: Tenant) -> list[tuple[str, str]]:
    """The quota fields the usage meters do not show: borrowing limits, cohort and fair-share weight."""
    q = tenant.quota

    def limit(value: int | None, unit: str) -> str:
        return "bounded by the cohort" if value is None else f"{value}{unit}"

    return [
        ("Borrow GPUs up to", limit(q.gpus_borrowing_limit, "")),
        ("Borrow CPU up to", limit(q.cpu_millis_borrowing_limit, " millicores")),
        ("Borrow memory up to", limit(q.memory_mib_borrowing_limit, " MiB")),
        ("Cohort", q.cohort or "the whole cluster"),
        ("Fair-share weight", str(tenant.weight)),
    ]


def members_context(request: HttpRequest, tenant: Tenant) -> dict[str, Any]:
    """What the tenant page shows of the team: whether the user may manage it (owners, platform admins), the
    roles to choose from, the recent membership changes (owners only), the quota and the policy."""
    manage = has_perm(request.user, tenant, Perm.MANAGE_TENANT)
    return {
        "can_manage_members": manage,
        "roles": Role.choices,
        "member_events": member_events(tenant=tenant)[:10] if manage else [],
        "invitations": invitations_pending(tenant=tenant) if manage else [],
        "quota_rows": quota_rows(tenant),
        "policy_rows": policy_rows(tenant),
    }


def _tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = tenants_for(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def _back(tenant: Tenant) -> HttpResponse:
    return redirect(reverse("tenant", args=[tenant.slug]) + "#members")


def refused(request: HttpRequest, tenant: Tenant, exc: MemberRefused, what: str) -> HttpResponse:
    if exc.status == 403:
        return forbidden(request, str(exc))
    for msgs in exc.errors.values():
        for message in msgs:
            messages.error(request, f"{what}: {message}")
    return _back(tenant)


@require_POST
@login_required
def member_add_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Add an existing user by username with a role (owners; the service checks again)."""
    tenant = _tenant(request, slug)
    username = request.POST.get("username", "").strip()
    role = request.POST.get("role", Role.MEMBER)
    try:
        member_add(tenant=tenant, actor=page_user(request), username=username, role=role)
    except MemberRefused as exc:
        return refused(request, tenant, exc, f"{username or 'The member'} was not added")
    messages.success(request, f"{username} added to {tenant.name} as {Role(role).label.lower()}.")
    return _back(tenant)


@require_POST
@login_required
def member_role_view(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    """Change a member's role (owners); the last owner keeps theirs."""
    tenant = _tenant(request, slug)
    role = request.POST.get("role", "")
    try:
        member_role_set(tenant=tenant, actor=page_user(request), username=username, role=role)
    except MemberRefused as exc:
        return refused(request, tenant, exc, f"The role of {username} was not changed")
    messages.success(request, f"{username} is now {Role(role).label.lower()} of {tenant.name}.")
    return _back(tenant)


@require_POST
@login_required
def member_remove_view(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    """Remove a member (owners); never the last owner."""
    tenant = _tenant(request, slug)
    try:
        member_remove(tenant=tenant, actor=page_user(request), username=username)
    except MemberRefused as exc:
        return refused(request, tenant, exc, f"{username} was not removed")
    messages.success(request, f"{username} removed from {tenant.name}.")
    if not tenants_for(request.user).filter(pk=tenant.pk).exists():
        return redirect("home")
    return _back(tenant)
