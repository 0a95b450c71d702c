"""Top-level URL routes: the browser pages, the admin console, the REST API, probes and metrics."""

from allauth.socialaccount import views as social_views
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from jobs import compare_pages, spec_views
from jobs import views as job_views
from jobs.tensorboard import views as tensorboard_views
from portal import device_pages, sso, views
from tenants import invitation_pages, member_pages, registry_pages, secret_pages, token_pages
from tenants import pages as tenant_pages

handler400 = "common.api.api_bad_request"

urlpatterns = [
    path("", views.dashboard, name="home"),
    path("login/", sso.LoginView.as_view(), name="login"),
    path("login/", sso.LoginView.as_view(), name="account_login"),  # allauth's name for the login page
    path("accounts/inactive/", sso.account_inactive, name="account_inactive"),
    path("accounts/oidc/<str:provider_id>/login/", sso.oidc_login, name="openid_connect_login"),
    path(
        "accounts/oidc/<str:provider_id>/login/callback/", sso.oidc_callback, name="openid_connect_callback"
    ),
    path("accounts/login/cancelled/", social_views.login_cancelled, name="socialaccount_login_cancelled"),
    path("accounts/login/error/", social_views.login_error, name="socialaccount_login_error"),
    path("accounts/signup/", social_views.signup, name="socialaccount_signup"),
    path("auth/device/", device_pages.device_code_view, name="device-code"),
    path("auth/device/token/", device_pages.device_token_view, name="device-token"),
    path("device/", device_pages.device_page, name="device"),
    path("logout/", sso.LogoutView.as_view(), name="logout"),
    path("tenant/switch/", tenant_pages.tenant_switch, name="tenant-switch"),
    path("jobs/", job_views.jobs_page, name="jobs"),
    path("jobs/new/", job_views.job_new, name="job-new"),
    path("spec/", spec_views.spec_page, name="spec"),
    path("jobs/compare/", compare_pages.jobs_compare_page, name="jobs-compare"),
    path("jobs/<str:job_id>/", job_views.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/labels/", compare_pages.job_labels_view, name="job-labels"),
    path("jobs/<str:job_id>/parts/", job_views.job_parts, name="job-parts"),
    path("jobs/<str:job_id>/cancel/", job_views.job_cancel_view, name="job-cancel"),
    path("jobs/<str:job_id>/retry/", job_views.job_retry_view, name="job-retry"),
    path("jobs/<str:job_id>/halt/", job_views.job_halt_view, name="job-halt"),
    path("jobs/<str:job_id>/resume/", job_views.job_resume_view, name="job-resume"),
    path("jobs/<str:job_id>/log.txt", job_views.job_log_download, name="job-log"),
    path("jobs/<str:job_id>/tensorboard/", tensorboard_views.job_tensorboard, name="job-tensorboard"),
    path("jobs/<str:job_id>/tensorboard/<path:path>", tensorboard_views.job_tensorboard),
    path("tokens/", token_pages.tokens_page, name="tokens"),
    path("tokens/new/", token_pages.token_create_view, name="token-create"),
    path("tokens/<int:token_id>/revoke/", token_pages.token_revoke_view, name="token-revoke"),
    path("tenants/<slug:slug>/", views.tenant_page, name="tenant"),
    path("tenants/<slug:slug>/members/", member_pages.member_add_view, name="tenant-member-add"),
    path("tenants/<slug:slug>/invitations/", invitation_pages.invitation_create_view, name="tenant-invite"),
    path(
        "tenants/<slug:slug>/invitations/<int:invitation_id>/revoke/",
        invitation_pages.invitation_revoke_view,
        name="tenant-invitation-revoke",
    ),
    path("invitations/<str:secret>/", invitation_pages.invitation_view, name="invitation"),
    path(
        "tenants/<slug:slug>/members/<str:username>/role/",
        member_pages.member_role_view,
        name="tenant-member-role",
    ),
    path(
        "tenants/<slug:slug>/members/<str:username>/remove/",
        member_pages.member_remove_view,
        name="tenant-member-remove",
    ),
    path("tenants/<slug:slug>/secrets/", secret_pages.secret_create_view, name="tenant-secret-create"),
    path(
        "tenants/<slug:slug>/secrets/<str:name>/rotate/",
        secret_pages.secret_rotate_view,
        name="tenant-secret-rotate",
    ),
    path(
        "tenants/<slug:slug>/secrets/<str:name>/delete/",
        secret_pages.secret_delete_view,
        name="tenant-secret-delete",
    ),
    path(
        "tenants/<slug:slug>/registries/", registry_pages.registry_create_view, name="tenant-registry-create"
    ),
    path(
        "tenants/<slug:slug>/registries/<str:name>/rotate/",
        registry_pages.registry_rotate_view,
        name="tenant-registry-rotate",
    ),
    path(
        "tenants/<slug:slug>/registries/<str:name>/delete/",
        registry_pages.registry_delete_view,
        name="tenant-registry-delete",
    ),
    path("notifications/", include("jobs.notifications.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api_urls")),
    path("ffdl/", include("jobs.ffdl_api.urls")),  # FfDL's REST API for its CLI and scripts (docs/ffdl.md)
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("portal.ops_urls")),
]
