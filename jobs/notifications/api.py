"""REST API for notifications (`/api/v1/notifications/`): your subscriptions and your tenants' (owners),
creating one (a webhook's signing secret is in the answer this once), changing, testing and deleting it,
resending an e-mail address's verification link, and its delivery log. Another user's or tenant's
subscription is a 404, as one that does not exist."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, api_user, errors
from common.errors import Refused
from jobs.notifications.choices import SUBSCRIBABLE, Channel, DeliveryState, Scope
from jobs.notifications.models import DeliveryAttempt, Notification, Subscription
from jobs.notifications.selectors import subscription_deliveries, subscription_get, subscription_list
from jobs.notifications.services import (
    subscription_create,
    subscription_delete,
    subscription_test,
    subscription_update,
)
from jobs.notifications.verification import verification_queue
from tenants.scoping import tenants_for

DELIVERIES_SHOWN = 100


class SubscriptionSerializer(serializers.ModelSerializer):
    """A subscription as its managers see it: never its signing secret."""

    tenant: serializers.SlugRelatedField[Subscription] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, help_text="The tenant's slug."
    )
    scope = serializers.ChoiceField(
        choices=Scope.values,
        read_only=True,
        help_text="user: your own jobs; tenant: every job of the tenant.",
    )
    owner = serializers.CharField(
        source="user.username", read_only=True, allow_null=True, help_text="Whose jobs (null: the tenant's)."
    )
    target = serializers.CharField(
        read_only=True, help_text="Where it sends (a Slack URL shows its host only)."
    )
    events = serializers.ListField(child=serializers.ChoiceField(choices=SUBSCRIBABLE))
    verified = serializers.BooleanField(
        read_only=True,
        help_text="False for an e-mail address whose verification link was not opened yet: nothing is sent "
        "there until it is (POST .../verify/ sends a new link).",
    )

    class Meta:
        model = Subscription
        fields = [
            "id", "tenant", "scope", "owner", "name", "channel", "target", "events", "queued_minutes",
            "enabled", "verified", "created_at",
        ]  # fmt: skip


class SubscriptionCreatedSerializer(SubscriptionSerializer):
    """A new subscription as POST returns it: with a webhook's signing secret, shown this once."""

    secret = serializers.SerializerMethodField(
        help_text="The webhook's signing secret (null for Slack and e-mail): copy it now, it is never shown "
        "again. Receivers check X-Trainyard-Signature with it (docs/notifications.md)."
    )

    class Meta(SubscriptionSerializer.Meta):
        fields = [*SubscriptionSerializer.Meta.fields, "secret"]

    def get_secret(self, subscription: Subscription) -> str | None:
        """The secret the view passes in the context (the row holds it sealed only)."""
        secret = self.context.get("secret")
        return str(secret) if secret else None


class SubscriptionCreateSerializer(serializers.Serializer[Any]):
    tenant = serializers.SlugField(help_text="The tenant's slug.")
    scope = serializers.ChoiceField(
        choices=Scope.values, default=Scope.USER, help_text="tenant: every job of it (owners only)."
    )
    name = serializers.CharField(max_length=100)
    channel = serializers.ChoiceField(choices=Channel.choices)
    url = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, help_text="http(s) URL, for webhook and slack."
    )
    email = serializers.CharField(required=False, allow_blank=True, max_length=254, help_text="For email.")
    events = serializers.ListField(child=serializers.ChoiceField(choices=SUBSCRIBABLE), allow_empty=False)
    queued_minutes = serializers.IntegerField(
        required=False, allow_null=True, help_text="With queued_too_long: minutes a job may wait (1-10080)."
    )


class SubscriptionUpdateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    events = serializers.ListField(child=serializers.ChoiceField(choices=SUBSCRIBABLE), allow_empty=False)
    queued_minutes = serializers.IntegerField(allow_null=True)
    enabled = serializers.BooleanField()


class DeliveryAttemptSerializer(serializers.ModelSerializer):
    """One attempt: when, the HTTP status (webhooks) or the error, and when the next one is due."""

    class Meta:
        model = DeliveryAttempt
        fields = ["number", "at", "status_code", "error", "duration_ms", "next_retry_at"]


class DeliverySerializer(serializers.ModelSerializer):
    """One notification of the subscription and its attempts (the delivery log)."""

    job = serializers.CharField(
        source="job_ref", read_only=True, allow_null=True, help_text="The job's id (null for a test)."
    )
    state = serializers.ChoiceField(choices=DeliveryState.choices, read_only=True)
    attempts = DeliveryAttemptSerializer(source="attempt_log", many=True, read_only=True)

    class Meta:
        model = Notification
        fields = ["id", "event", "job", "state", "created_at", "delivered_at", "next_attempt_at", "attempts"]


def _subscription(request: Request, subscription_id: int) -> Subscription:
    try:
        return subscription_get(user=request.user, subscription_id=subscription_id)
    except Subscription.DoesNotExist:
        raise Http404("no such subscription") from None


TENANT_QUERY = OpenApiParameter("tenant", OpenApiTypes.STR, description="Only this tenant's (its slug).")


class SubscriptionListView(ApiView):
    """GET: your subscriptions and those of tenants you own. POST: a new one (its secret shown once)."""

    @extend_schema(
        parameters=[TENANT_QUERY], responses={200: SubscriptionSerializer(many=True), **errors(401, 429)}
    )
    def get(self, request: Request) -> Response:
        rows = subscription_list(user=request.user)
        if slug := request.query_params.get("tenant"):
            rows = rows.filter(tenant__slug=slug)
        return Response(SubscriptionSerializer(rows, many=True).data)

    @extend_schema(
        request=SubscriptionCreateSerializer,
        responses={201: SubscriptionCreatedSerializer, **errors(400, 401, 403, 404, 429)},
    )
    def post(self, request: Request) -> Response:
        form = SubscriptionCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        slug = fields.pop("tenant")
        tenant = tenants_for(request.user).filter(slug=slug).first()
        if tenant is None:
            raise Refused({"tenant": [f"no tenant {slug}"]}, status=404)
        created = subscription_create(user=api_user(request), tenant=tenant, **fields)
        body = SubscriptionCreatedSerializer(created.subscription, context={"secret": created.secret}).data
        return Response(body, status=status.HTTP_201_CREATED)


class SubscriptionDetailView(ApiView):
    """GET one subscription; PATCH its name, events, minutes or enabled flag; DELETE it."""

    @extend_schema(responses={200: SubscriptionSerializer, **errors(401, 404, 429)})
    def get(self, request: Request, subscription_id: int) -> Response:
        return Response(SubscriptionSerializer(_subscription(request, subscription_id)).data)

    @extend_schema(
        request=SubscriptionUpdateSerializer(partial=True),
        responses={200: SubscriptionSerializer, **errors(400, 401, 404, 429)},
    )
    def patch(self, request: Request, subscription_id: int) -> Response:
        subscription = _subscription(request, subscription_id)
        if not isinstance(request.data, dict):
            raise Refused({"": ["send a JSON object of the fields to change"]})
        unknown = sorted(set(request.data) - set(SubscriptionUpdateSerializer().fields))
        if unknown:
            raise Refused({name: ["cannot be changed (create a new subscription)"] for name in unknown})
        form = SubscriptionUpdateSerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        row = subscription_update(subscription=subscription, **form.validated_data)
        return Response(SubscriptionSerializer(row).data)

    @extend_schema(responses={204: OpenApiResponse(description="Deleted."), **errors(401, 404, 429)})
    def delete(self, request: Request, subscription_id: int) -> Response:
        subscription_delete(subscription=_subscription(request, subscription_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SubscriptionTestView(ApiView):
    """POST: queue a test notification to the subscription's target; see it in the delivery log."""

    @extend_schema(request=None, responses={202: DeliverySerializer, **errors(401, 404, 429)})
    def post(self, request: Request, subscription_id: int) -> Response:
        subscription = _subscription(request, subscription_id)
        notification = subscription_test(subscription=subscription, user=api_user(request))
        return Response(DeliverySerializer(notification).data, status=status.HTTP_202_ACCEPTED)


class SubscriptionVerifyView(ApiView):
    """POST: send an unverified e-mail subscription's address a new verification link."""

    @extend_schema(request=None, responses={202: SubscriptionSerializer, **errors(400, 401, 404, 429)})
    def post(self, request: Request, subscription_id: int) -> Response:
        subscription = verification_queue(subscription=_subscription(request, subscription_id))
        return Response(SubscriptionSerializer(subscription).data, status=status.HTTP_202_ACCEPTED)


class SubscriptionDeliveriesView(ApiView):
    """GET: the subscription's newest notifications (at most 100), each with its attempts."""

    @extend_schema(responses={200: DeliverySerializer(many=True), **errors(401, 404, 429)})
    def get(self, request: Request, subscription_id: int) -> Response:
        rows = subscription_deliveries(
            subscription=_subscription(request, subscription_id), limit=DELIVERIES_SHOWN
        )
        return Response(DeliverySerializer(rows, many=True).data)
