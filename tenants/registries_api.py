"""REST API for a tenant's private registry credentials (`/api/v1/tenants/<slug>/registries/`): write-only.

Members list the names, hosts and usernames; owners create, rotate (PUT replaces username and password) and
delete them. No answer ever carries a password. Another tenant's credentials are a 404, a non-owner's change
a 403, a host the tenant's `image_registries` policy does not allow a 400 on `host`.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, api_user, errors
from tenants.models import RegistryCredential, RegistryCredentialEvent, Tenant
from tenants.registries import (
    RegistryRefused,
    registry_credential_create,
    registry_credential_delete,
    registry_credential_events,
    registry_credential_list,
    registry_credential_rotate,
)
from tenants.scoping import tenants_for


class RegistrySerializer(serializers.ModelSerializer):
    """Registry credentials as anyone sees them: name, host, username and history, never the password."""

    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    rotated_by = serializers.CharField(source="rotated_by.username", allow_null=True, default=None)

    class Meta:
        model = RegistryCredential
        fields = ["name", "host", "username", "created_at", "created_by", "rotated_at", "rotated_by"]


class RegistryLoginSerializer(serializers.Serializer):
    """The login for a registry (the password or token is write-only)."""

    username = serializers.CharField(max_length=255)
    password = serializers.CharField(write_only=True, help_text="A password or access token; never shown.")


class RegistryCreateSerializer(RegistryLoginSerializer):
    """New registry credentials: a name, the registry host images name, and the login."""

    name = serializers.CharField(max_length=63)
    host = serializers.CharField(max_length=253, help_text="e.g. registry.example.com or registry.local:5000")


class RegistryEventSerializer(serializers.ModelSerializer):
    """Who created, rotated or deleted which credentials, and when (never a password)."""

    actor = serializers.CharField(source="actor.username", allow_null=True, default=None)

    class Meta:
        model = RegistryCredentialEvent
        fields = ["name", "host", "action", "actor", "at"]


def _tenant(request: Request, slug: str) -> Tenant:
    tenant = tenants_for(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def _credential(request: Request, slug: str, name: str) -> RegistryCredential:
    credential = registry_credential_list(tenant=_tenant(request, slug)).filter(name=name).first()
    if credential is None:
        raise Http404("no such registry credential")
    return credential


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise RegistryRefused({"": ["send a JSON object"]})
    return {str(k): v for k, v in request.data.items()}


class TenantRegistryListView(ApiView):
    """GET: the tenant's registry credentials (no passwords; any member). POST: add some (owners)."""

    @extend_schema(responses={200: RegistrySerializer(many=True), **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        rows = registry_credential_list(tenant=_tenant(request, slug))
        return Response(RegistrySerializer(rows, many=True).data)

    @extend_schema(
        request=RegistryCreateSerializer,
        responses={201: RegistrySerializer, **errors(400, 401, 403, 404, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        body = _body(request)
        name, host = body.pop("name", None), body.pop("host", None)
        credential = registry_credential_create(
            tenant=tenant, user=api_user(request), name=name, host=host, values=body
        )
        return Response(RegistrySerializer(credential).data, status=status.HTTP_201_CREATED)


class TenantRegistryDetailView(ApiView):
    """GET: one registry credential (no password). PUT: rotate it, replacing username and password (owners).
    DELETE: delete it (owners)."""

    @extend_schema(responses={200: RegistrySerializer, **errors(401, 404, 429)})
    def get(self, request: Request, slug: str, name: str) -> Response:
        return Response(RegistrySerializer(_credential(request, slug, name)).data)

    @extend_schema(
        request=RegistryLoginSerializer,
        responses={200: RegistrySerializer, **errors(400, 401, 403, 404, 429)},
    )
    def put(self, request: Request, slug: str, name: str) -> Response:
        credential = _credential(request, slug, name)
        rotated = registry_credential_rotate(
            credential=credential, user=api_user(request), values=_body(request)
        )
        return Response(RegistrySerializer(rotated).data)

    @extend_schema(responses={204: OpenApiResponse(description="Deleted."), **errors(401, 403, 404, 429)})
    def delete(self, request: Request, slug: str, name: str) -> Response:
        registry_credential_delete(credential=_credential(request, slug, name), user=api_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TenantRegistryEventsView(ApiView):
    """GET: the audit of the tenant's registry credentials, newest first (any member; never passwords)."""

    @extend_schema(responses={200: RegistryEventSerializer(many=True), **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        rows = registry_credential_events(tenant=_tenant(request, slug))[:200]
        return Response(RegistryEventSerializer(rows, many=True).data)
