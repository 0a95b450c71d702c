"""Routes of the notifications pages, under /notifications/."""

from django.urls import path

from jobs.notifications import views

urlpatterns = [
    path("", views.notifications_page, name="notifications"),
    path("<int:subscription_id>/", views.notification_detail, name="notification-detail"),
    path("<int:subscription_id>/toggle/", views.notification_toggle, name="notification-toggle"),
    path("<int:subscription_id>/test/", views.notification_test, name="notification-test"),
    path("<int:subscription_id>/delete/", views.notification_delete, name="notification-delete"),
    path(
        "<int:subscription_id>/verify/", views.notification_verify_resend, name="notification-verify-resend"
    ),
    path("<int:subscription_id>/verify/<str:token>/", views.notification_verify, name="notification-verify"),
]
