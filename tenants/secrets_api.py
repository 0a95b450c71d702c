"""REST API for a tenant's data-store secrets (`/api/v1/tenants/<slug>/secrets/`): write-only values.

Members list the names and which keys each holds; owners create, rotate (PUT replaces every value) and
delete them. No answer ever carries a value. Another tenant's secrets are a 404, a non-owner's change a 403.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, api_user, errors
from tenants.models import DataStoreSecret, DataStoreSecretEvent, Tenant
from tenants.scoping import tenants_for
from tenants.secrets import (
    SecretRefused,
    datastore_secret_create,
    datastore_secret_delete,
    datastore_secret_events,
    datastore_secret_list,
    datastore_secret_rotate,
)


class SecretSerializer(serializers.ModelSerializer):
    """A data-store secret as anyone sees it: its name, the keys it holds and its history, never a value."""

    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    rotated_by = serializers.CharField(source="rotated_by.username", allow_null=True, default=None)
    keys = serializers.ListField(child=serializers.CharField(), help_text="The keys it holds (never values).")

    class Meta:
        model = DataStoreSecret
        fields = ["name", "keys", "created_at", "created_by", "rotated_at", "rotated_by"]


class SecretValuesSerializer(serializers.Serializer):
    """The values of a secret (write-only): an S3 access key pair, optionally its region."""

    access_key_id = serializers.CharField(write_only=True)
    secret_access_key = serializers.CharField(write_only=True)
    region = serializers.CharField(write_only=True, required=False, help_text="e.g. us-east-1")


class SecretCreateSerializer(SecretValuesSerializer):
    """A new secret: its name (what specs put in `volumes[].secret`) and its values."""

    name = serializers.CharField(max_length=63)


class SecretEventSerializer(serializers.ModelSerializer):
    """Who created, rotated or deleted which secret, and when (the keys it held; never values)."""

    actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
    keys = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = DataStoreSecretEvent
        fields = ["name", "action", "keys", "actor", "at"]


def _tenant(request: Request, slug: str) -> Tenant:
    tenant = tenants_for(request.user).filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def _secret(request: Request, slug: str, name: str) -> DataStoreSecret:
    secret = datastore_secret_list(tenant=_tenant(request, slug)).filter(name=name).first()
    if secret is None:
        raise Http404("no such data-store secret")
    return secret


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise SecretRefused({"": ["send a JSON object"]})
    return {str(k): v for k, v in request.data.items()}


class TenantSecretListView(ApiView):
    """GET: the tenant's data-store secrets (names and keys; any member). POST: create one (owners)."""

    @extend_schema(responses={200: SecretSerializer(many=True), **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        rows = datastore_secret_list(tenant=_tenant(request, slug))
        return Response(SecretSerializer(rows, many=True).data)

    @extend_schema(
        request=SecretCreateSerializer,
        responses={201: SecretSerializer, **errors(400, 401, 403, 404, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        body = _body(request)
        name = body.pop("name", None)
        secret = datastore_secret_create(tenant=tenant, user=api_user(request), name=name, values=body)
        return Response(SecretSerializer(secret).data, status=status.HTTP_201_CREATED)


class TenantSecretDetailView(ApiView):
    """GET: one secret (names and keys). PUT: rotate it, replacing every value (owners). DELETE: delete it
    (owners; 409 while jobs that may still launch name it)."""

    @extend_schema(responses={200: SecretSerializer, **errors(401, 404, 429)})
    def get(self, request: Request, slug: str, name: str) -> Response:
        return Response(SecretSerializer(_secret(request, slug, name)).data)

    @extend_schema(
        request=SecretValuesSerializer,
        responses={200: SecretSerializer, **errors(400, 401, 403, 404, 429)},
    )
    def put(self, request: Request, slug: str, name: str) -> Response:
        secret = _secret(request, slug, name)
        rotated = datastore_secret_rotate(secret=secret, user=api_user(request), values=_body(request))
        return Response(SecretSerializer(rotated).data)

    @extend_schema(
        responses={204: OpenApiResponse(description="Deleted."), **errors(401, 403, 404, 409, 429)}
    )
    def delete(self, request: Request, slug: str, name: str) -> Response:
        datastore_secret_delete(secret=_secret(request, slug, name), user=api_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TenantSecretEventsView(ApiView):
    """GET: the audit of the tenant's data-store secrets, newest first (any member; never values)."""

    @extend_schema(responses={200: SecretEventSerializer(many=True), **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        rows = datastore_secret_events(tenant=_tenant(request, slug))[:200]
        return Response(SecretEventSerializer(rows, many=True).data)
