"""REST API for a tenant's invitations (`/api/v1/tenants/<slug>/invitations/`), owners and platform admins
only: list the pending ones, invite an address (the answer holds the link, shown this once, and whether it
was e-mailed), revoke one. Accepting is done in the browser, by the invited user after logging in."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, api_user, errors
from tenants.invitations import (
    invitation_create,
    invitation_revoke,
    invitation_send,
    invitations_pending,
)
from tenants.members import MemberRefused
from tenants.models import Invitation, Role, Tenant
from tenants.scoping import Perm, has_perm, tenants_for


class InvitationSerializer(serializers.ModelSerializer):
    """A pending invitation: the address, the role it gives, who sent it and until when it is valid."""

    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    role = serializers.ChoiceField(choices=Role.values)

    class Meta:
        model = Invitation
        fields = ["id", "email", "role", "created_by", "created_at", "expires_at"]


class InvitationCreateSerializer(serializers.Serializer):
    email = serializers.EmailField()
    role = serializers.ChoiceField(choices=Role.values, default=Role.MEMBER)


class InvitationWithLinkSerializer(InvitationSerializer):
    """A new invitation as POST returns it: with its link, shown this once, and whether it was e-mailed."""

    link = serializers.SerializerMethodField(help_text="The link the invited user opens to accept.")
    emailed = serializers.SerializerMethodField(help_text="Whether the link was e-mailed to the address.")

    class Meta(InvitationSerializer.Meta):
        fields = [*InvitationSerializer.Meta.fields, "link", "emailed"]

    def get_link(self, invitation: Invitation) -> str:
        return str(self.context["link"])

    def get_emailed(self, invitation: Invitation) -> bool:
        return bool(self.context["emailed"])


def _owned_tenant(request: Request, slug: str) -> Tenant:
    tenant = tenants_for(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    if not has_perm(request.user, tenant, Perm.MANAGE_TENANT):
        raise PermissionDenied(f"only owners of tenant {tenant.slug} manage its invitations")
    return tenant


class TenantInvitationListView(ApiView):
    """GET: the tenant's pending invitations. POST {"email", "role"}: invite an address."""

    @extend_schema(responses={200: InvitationSerializer(many=True), **errors(401, 403, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        rows = invitations_pending(tenant=_owned_tenant(request, slug))
        return Response(InvitationSerializer(rows, many=True).data)

    @extend_schema(
        request=InvitationCreateSerializer,
        responses={201: InvitationWithLinkSerializer, **errors(400, 401, 403, 404, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        tenant = _owned_tenant(request, slug)
        if not isinstance(request.data, dict):
            raise MemberRefused({"": ["send a JSON object"]})
        body: dict[str, Any] = {str(k): v for k, v in request.data.items()}
        unknown = sorted(set(body) - {"email", "role"})
        if unknown:
            raise MemberRefused({name: ["unknown field; send email and role"] for name in unknown})
        invitation, secret = invitation_create(
            tenant=tenant,
            actor=api_user(request),
            email=body.get("email"),
            role=body.get("role", Role.MEMBER),
        )
        link = request.build_absolute_uri(reverse("invitation", args=[secret]))
        emailed = invitation_send(invitation=invitation, link=link)
        data = InvitationWithLinkSerializer(invitation, context={"link": link, "emailed": emailed}).data
        return Response(data, status=status.HTTP_201_CREATED)


class TenantInvitationDetailView(ApiView):
    """DELETE: revoke a pending invitation; its link stops working."""

    @extend_schema(responses={204: OpenApiResponse(description="Revoked."), **errors(401, 403, 404, 429)})
    def delete(self, request: Request, slug: str, invitation_id: int) -> Response:
        tenant = _owned_tenant(request, slug)
        invitation = invitations_pending(tenant=tenant).filter(pk=invitation_id).first()
        if invitation is None:
            raise Http404("no such pending invitation")
        invitation_revoke(invitation=invitation, actor=api_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
