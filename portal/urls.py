"""Top-level URL routes."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.generic import RedirectView


def healthz(request: HttpRequest) -> HttpResponse:
    """The process is alive; says nothing about its dependencies."""
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False), name="home"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api_urls")),
    path("healthz", healthz, name="healthz"),
]
