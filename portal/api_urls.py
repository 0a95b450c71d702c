"""URL routes of the REST API, version 1."""

from django.urls import path

from jobs import api as jobs_api
from tenants import api as tenants_api

urlpatterns = [
    path("jobs/", jobs_api.JobListView.as_view(), name="api-jobs"),
    path("jobs/<str:job_id>/", jobs_api.JobDetailView.as_view(), name="api-job"),
    path("jobs/<str:job_id>/cancel/", jobs_api.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<str:job_id>/retry/", jobs_api.JobRetryView.as_view(), name="api-job-retry"),
    path("jobs/<str:job_id>/events/", jobs_api.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<str:job_id>/logs/", jobs_api.JobLogsView.as_view(), name="api-job-logs"),
    path("jobs/<str:job_id>/metrics/", jobs_api.JobMetricsView.as_view(), name="api-job-metrics"),
    path("tenants/", tenants_api.TenantListView.as_view(), name="api-tenants"),
    path("tenants/<slug:slug>/", tenants_api.TenantDetailView.as_view(), name="api-tenant"),
    path("tenants/<slug:slug>/members/", tenants_api.TenantMembersView.as_view(), name="api-tenant-members"),
    path("cluster/", jobs_api.ClusterView.as_view(), name="api-cluster"),
    path("tokens/", tenants_api.TokenListView.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>/", tenants_api.TokenDetailView.as_view(), name="api-token"),
]
