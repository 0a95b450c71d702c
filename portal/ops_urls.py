"""Operational endpoints: probes and Prometheus metrics (no login; expose /metrics only inside)."""

from django.urls import path

from portal import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
]
