"""Routes of the notifications API, under /api/v1/notifications/."""

from django.urls import path

from jobs.notifications import api

urlpatterns = [
    path("", api.SubscriptionListView.as_view(), name="api-notifications"),
    path("<int:subscription_id>/", api.SubscriptionDetailView.as_view(), name="api-notification"),
    path("<int:subscription_id>/test/", api.SubscriptionTestView.as_view(), name="api-notification-test"),
    path(
        "<int:subscription_id>/verify/", api.SubscriptionVerifyView.as_view(), name="api-notification-verify"
    ),
    path(
        "<int:subscription_id>/deliveries/",
        api.SubscriptionDeliveriesView.as_view(),
        name="api-notification-deliveries",
    ),
]
