"""Admin console for notifications (read-mostly): subscriptions without their secrets, and each
notification with its delivery attempts. Registered by jobs/admin.py."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from jobs.notifications.models import DeliveryAttempt, Notification, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tenant", "user", "channel", "target", "enabled", "created_at"]
    list_filter = ["channel", "enabled", "tenant"]
    search_fields = ["name", "url", "email", "user__username"]
    list_select_related = ["tenant", "user"]
    fields = [
        "tenant",
        "user",
        "name",
        "channel",
        "target",
        "events",
        "queued_minutes",
        "enabled",
        "created_at",
    ]
    readonly_fields = ["tenant", "user", "channel", "target", "events", "queued_minutes", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # created where the target is checked and the secret shown: the page, API or CLI


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "at", "status_code", "error", "duration_ms", "next_retry_at")

    def has_add_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "event",
        "job_ref",
        "subscription",
        "state",
        "attempts",
        "next_attempt_at",
        "created_at",
    ]
    list_filter = ["state", "event"]
    search_fields = ["job__id", "subscription__name"]
    list_select_related = ["subscription"]
    readonly_fields = [f.name for f in Notification._meta.fields]
    inlines = [DeliveryAttemptInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
