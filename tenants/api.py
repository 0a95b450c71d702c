"""REST API for tenants (`/api/v1/tenants/`) and the caller's API tokens (`/api/v1/tokens/`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.http import Http404
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.apiutil import api_user
from tenants.models import ApiToken, Membership, Tenant
from tenants.scoping import Perm, has_perm, tenants_for
from tenants.tokens import token_create, token_revoke
from tenants.usage import tenant_usage


def tenant_data(tenant: Tenant, user: Any) -> dict[str, Any]:
    """A tenant as the API shows it to `user`: quota, current usage and the user's role."""
    quota = tenant.quota
    role = Membership.objects.filter(tenant=tenant, user=user).values_list("role", flat=True).first()
    return {
        "slug": tenant.slug,
        "name": tenant.name,
        "weight": tenant.weight,
        "active": tenant.active,
        "role": role or ("admin" if getattr(user, "is_superuser", False) else None),
        "quota": {
            "gpus": quota.gpus,
            "cpu_millis": quota.cpu_millis,
            "memory_mib": quota.memory_mib,
            "max_running_jobs": quota.max_running_jobs,
            "max_queued_jobs": quota.max_queued_jobs,
        },
        "usage": asdict(tenant_usage(tenant)),
    }


def _tenant(request: Request, slug: str) -> Tenant:
    tenant = tenants_for(request.user).select_related("quota").filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


class TenantListView(APIView):
    """GET: the tenants you belong to, with quota, usage and your role."""

    def get(self, request: Request) -> Response:
        tenants = tenants_for(request.user).select_related("quota")
        return Response([tenant_data(t, request.user) for t in tenants])


class TenantDetailView(APIView):
    def get(self, request: Request, slug: str) -> Response:
        return Response(tenant_data(_tenant(request, slug), request.user))


class TenantMembersView(APIView):
    """GET: members and roles (owners see e-mail addresses too)."""

    def get(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        owner = has_perm(request.user, tenant, Perm.MANAGE_TENANT)
        rows = Membership.objects.filter(tenant=tenant).select_related("user")
        return Response(
            [
                {"username": m.user.username, "role": m.role, **({"email": m.user.email} if owner else {})}
                for m in rows
            ]
        )


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class TokenListView(APIView):
    """GET: your tokens (never their secrets). POST {"name"}: a new token, its secret shown this once."""

    def get(self, request: Request) -> Response:
        return Response(TokenSerializer(ApiToken.objects.filter(user=api_user(request)), many=True).data)

    def post(self, request: Request) -> Response:
        form = TokenCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        token, secret = token_create(user=api_user(request), **form.validated_data)
        return Response({**TokenSerializer(token).data, "token": secret}, status=status.HTTP_201_CREATED)


class TokenDetailView(APIView):
    def delete(self, request: Request, token_id: int) -> Response:
        token = ApiToken.objects.filter(user=api_user(request), pk=token_id).first()
        if token is None:
            raise Http404("no such token")
        token_revoke(token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
