"""Invitation pages: an owner invites an e-mail address from the tenant page (the answer shows the link once,
with whether it was e-mailed) and revokes pending invitations; the invited user opens the link, logs in,
and accepts."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from tenants.invitations import (
    invitation_accept,
    invitation_create,
    invitation_lookup,
    invitation_refusal,
    invitation_revoke,
    invitation_send,
    invitations_pending,
)
from tenants.member_pages import refused
from tenants.members import MemberRefused
from tenants.models import Role, Tenant
from tenants.pages import page_user, render_page
from tenants.scoping import tenants_for


def _tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = tenants_for(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


@require_POST
@login_required
def invitation_create_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Invite an address (owners); the answer shows the link once and whether it was e-mailed."""
    tenant = _tenant(request, slug)
    email = request.POST.get("email", "").strip()
    role = request.POST.get("role", Role.MEMBER)
    try:
        invitation, secret = invitation_create(
            tenant=tenant, actor=page_user(request), email=email, role=role
        )
    except MemberRefused as exc:
        return refused(request, tenant, exc, f"{email or 'The address'} was not invited")
    link = request.build_absolute_uri(reverse("invitation", args=[secret]))
    sent = invitation_send(invitation=invitation, link=link)
    context = {"shown": tenant, "invitation": invitation, "link": link, "sent": sent}
    response = render_page(request, "portal/invitation_created.html", context, status=201)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@login_required
def invitation_revoke_view(request: HttpRequest, slug: str, invitation_id: int) -> HttpResponse:
    """Revoke a pending invitation (owners); its link stops working."""
    tenant = _tenant(request, slug)
    invitation = invitations_pending(tenant=tenant).filter(pk=invitation_id).first()
    if invitation is None:
        raise Http404("no such pending invitation")
    try:
        invitation_revoke(invitation=invitation, actor=page_user(request))
    except MemberRefused as exc:
        return refused(request, tenant, exc, "The invitation was not revoked")
    messages.success(request, f"Invitation of {invitation.email} revoked.")
    return redirect(reverse("tenant", args=[tenant.slug]) + "#members")


@require_http_methods(["GET", "POST"])
@login_required
def invitation_view(request: HttpRequest, secret: str) -> HttpResponse:
    """GET: what the invitation offers, and an Accept button. POST: accept it; then the tenant's page."""
    user = page_user(request)
    if request.method == "POST":
        try:
            membership = invitation_accept(secret=secret, user=user)
        except MemberRefused as exc:
            status, message = exc.status, str(exc)
        else:
            messages.success(request, f"You joined {membership.tenant.name} as {membership.role}.")
            return redirect("tenant", membership.tenant.slug)
    else:
        invitation = invitation_lookup(secret)
        refusal = invitation_refusal(invitation, user)
        if refusal is None:
            response = render_page(request, "portal/invitation.html", {"invitation": invitation})
            response["Cache-Control"] = "no-store"
            return response
        status, message = refusal
    return render_page(request, "portal/invitation.html", {"refusal": message}, status=status)
