"""URL routes of the REST API, version 1."""

from django.urls import include, path

from jobs import api as jobs_api
from jobs import compare_api, spec_views
from jobs.artifacts import api as artifacts_api
from jobs.artifacts import event_views, pod_views
from tenants import api as tenants_api
from tenants import invitations_api, registries_api, secrets_api

urlpatterns = [
    path("jobs/", jobs_api.JobListView.as_view(), name="api-jobs"),
    path("jobs/compare/", compare_api.JobCompareView.as_view(), name="api-jobs-compare"),
    path("jobs/<str:job_id>/", jobs_api.JobDetailView.as_view(), name="api-job"),
    path("jobs/<str:job_id>/cancel/", jobs_api.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<str:job_id>/retry/", jobs_api.JobRetryView.as_view(), name="api-job-retry"),
    path("jobs/<str:job_id>/halt/", jobs_api.JobHaltView.as_view(), name="api-job-halt"),
    path("jobs/<str:job_id>/resume/", jobs_api.JobResumeView.as_view(), name="api-job-resume"),
    path("jobs/<str:job_id>/events/", jobs_api.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<str:job_id>/logs/", jobs_api.JobLogsView.as_view(), name="api-job-logs"),
    path("jobs/<str:job_id>/metrics/", jobs_api.JobMetricsView.as_view(), name="api-job-metrics"),
    path("jobs/<str:job_id>/telemetry/", jobs_api.JobTelemetryView.as_view(), name="api-job-telemetry"),
    path("jobs/<str:job_id>/results/", artifacts_api.JobResultsView.as_view(), name="api-job-results"),
    path(
        "jobs/<str:job_id>/results.zip", artifacts_api.JobResultsZipView.as_view(), name="api-job-results-zip"
    ),
    path(
        "jobs/<str:job_id>/results/<path:path>",
        artifacts_api.JobResultFileView.as_view(),
        name="api-job-result-file",
    ),
    path("jobs/<str:job_id>/code/", artifacts_api.JobCodeView.as_view(), name="api-job-code"),
    # What learner pods call, with their attempt's artifact token (docs/artifacts.md).
    path("artifacts/<str:job_id>/<int:attempt>/code", pod_views.code_download, name="pod-code"),
    path(
        "artifacts/<str:job_id>/<int:attempt>/<int:learner>/results/files/<path:path>",
        pod_views.result_upload,
        name="pod-result-upload",
    ),
    path(
        "artifacts/<str:job_id>/<int:attempt>/<int:learner>/results/complete",
        pod_views.results_complete,
        name="pod-results-complete",
    ),
    path(
        "artifacts/<str:job_id>/<int:attempt>/<int:learner>/tensorboard/files/<path:path>",
        event_views.event_file_upload,
        name="pod-event-file-upload",
    ),
    path("tenants/", tenants_api.TenantListView.as_view(), name="api-tenants"),
    path("tenants/<slug:slug>/", tenants_api.TenantDetailView.as_view(), name="api-tenant"),
    path("tenants/<slug:slug>/members/", tenants_api.TenantMembersView.as_view(), name="api-tenant-members"),
    path(
        "tenants/<slug:slug>/invitations/",
        invitations_api.TenantInvitationListView.as_view(),
        name="api-tenant-invitations",
    ),
    path(
        "tenants/<slug:slug>/invitations/<int:invitation_id>/",
        invitations_api.TenantInvitationDetailView.as_view(),
        name="api-tenant-invitation",
    ),
    path(
        "tenants/<slug:slug>/member-events/",
        tenants_api.TenantMemberEventsView.as_view(),
        name="api-tenant-member-events",
    ),
    path(
        "tenants/<slug:slug>/members/<str:username>/",
        tenants_api.TenantMemberDetailView.as_view(),
        name="api-tenant-member",
    ),
    path("tenants/<slug:slug>/policy/", tenants_api.TenantPolicyView.as_view(), name="api-tenant-policy"),
    path("tenants/<slug:slug>/quota/", tenants_api.TenantQuotaView.as_view(), name="api-tenant-quota"),
    path(
        "tenants/<slug:slug>/secrets/", secrets_api.TenantSecretListView.as_view(), name="api-tenant-secrets"
    ),
    path(
        "tenants/<slug:slug>/secret-events/",
        secrets_api.TenantSecretEventsView.as_view(),
        name="api-tenant-secret-events",
    ),
    path(
        "tenants/<slug:slug>/secrets/<str:name>/",
        secrets_api.TenantSecretDetailView.as_view(),
        name="api-tenant-secret",
    ),
    path(
        "tenants/<slug:slug>/registries/",
        registries_api.TenantRegistryListView.as_view(),
        name="api-tenant-registries",
    ),
    path(
        "tenants/<slug:slug>/registry-events/",
        registries_api.TenantRegistryEventsView.as_view(),
        name="api-tenant-registry-events",
    ),
    path(
        "tenants/<slug:slug>/registries/<str:name>/",
        registries_api.TenantRegistryDetailView.as_view(),
        name="api-tenant-registry",
    ),
    path("cluster/", jobs_api.ClusterView.as_view(), name="api-cluster"),
    path("spec/schema/", spec_views.SpecSchemaView.as_view(), name="api-spec-schema"),
    path("spec/validate/", spec_views.SpecValidateView.as_view(), name="api-spec-validate"),
    path("tokens/", tenants_api.TokenListView.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>/", tenants_api.TokenDetailView.as_view(), name="api-token"),
    path("notifications/", include("jobs.notifications.api_urls")),
]
